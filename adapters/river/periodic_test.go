package riveronce

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/jobkey"
	"github.com/jobonce/jobonce/internal/testenv"
)

// periodicRow is a row as River's periodic job enqueuer inserts it, with the
// occurrence the middleware recorded (none when occurrence is "").
func periodicRow(id int64, args, periodicID, occurrence string) *rivertype.JobRow {
	md := map[string]any{"periodic": true}
	if periodicID != "" {
		md["river:periodic_job_id"] = periodicID
	}
	if occurrence != "" {
		md[metadataOccurrence] = occurrence
	}
	r := row(id, "digest", args)
	r.Metadata, _ = json.Marshal(md)
	return r
}

// TestPeriodicJobKeyNamesItsOccurrence: the default key of a periodic job
// names its occurrence, not its args: copies of one occurrence (another row,
// a snoozed or retried row whose ScheduledAt River moved) share it, other
// occurrences do not; Config.Key and Keyer still win.
func TestPeriodicJobKeyNamesItsOccurrence(t *testing.T) {
	t.Parallel()
	var cfg Config
	const at, next = "2024-05-01T10:00:00Z", "2024-05-01T10:05:00Z"

	first := keyed(cfg.job(periodicRow(1, `{}`, "", at), nil))
	require.Equal(t, core.Job{Key: "digest:periodic:" + at + ":" + core.Fingerprint([]byte(`{}`)), Kind: "digest", Source: "river"}, first,
		"no fingerprint stored, and not a payload-derived default key")
	copyRow := periodicRow(2, `{}`, "", at) // the same occurrence inserted again (a new leader)
	copyRow.ScheduledAt = time.Now()        // River moved it (a snooze, a retry, a rescue)
	copyRow.Metadata, _ = json.Marshal(map[string]any{"periodic": true, metadataOccurrence: at, "snoozes": 3})
	require.Equal(t, first, keyed(cfg.job(copyRow, nil)), "copies of one occurrence share the key")
	require.NotEqual(t, first.Key, keyed(cfg.job(periodicRow(3, `{}`, "", next), nil)).Key, "another occurrence runs")
	require.NotEqual(t, first.Key, keyed(cfg.job(periodicRow(4, `{"n":1}`, "", at), nil)).Key, "another periodic job of the kind due at once runs")

	withID := keyed(cfg.job(periodicRow(5, `{"n":1}`, "daily", at), nil))
	require.Equal(t, "digest:periodic:daily:"+at, withID.Key)
	require.Equal(t, withID, keyed(cfg.job(periodicRow(6, `{"n":2}`, "daily", at), nil)), "an occurrence of an ID is one job whatever its args")
	require.NotEqual(t, withID.Key, keyed(cfg.job(periodicRow(7, `{"n":1}`, "daily", next), nil)).Key)

	unrecorded := keyed(cfg.job(periodicRow(8, `{}`, "", ""), nil))
	require.Equal(t, "digest:periodic:job:8", unrecorded.Key, "inserted without the middleware: keyed by its row")
	require.False(t, unrecorded.DefaultKey)
	require.NotEqual(t, unrecorded.Key, keyed(cfg.job(periodicRow(9, `{}`, "", ""), nil)).Key)

	require.Equal(t, "email:welcome:42", keyed(cfg.job(periodicRow(10, `{"user":"42"}`, "", at), keyedArgs{User: "42"})).Key, "Keyer wins")
	custom := Config{Key: func(*rivertype.JobRow) string { return "custom" }}
	require.Equal(t, "custom", keyed(custom.job(periodicRow(11, `{}`, "", at), nil)).Key, "Config.Key wins")
	recorded := periodicRow(12, `{}`, "", at)
	recorded.Metadata, _ = json.Marshal(map[string]any{"periodic": true, metadataOccurrence: at, MetadataKey: "from-keyer"})
	require.Equal(t, "from-keyer", keyed(cfg.job(recorded, nil)).Key, "a key recorded at insert wins")
	fp := Config{Fingerprint: func(*rivertype.JobRow) string { return "v1" }}
	require.Equal(t, "v1", keyed(fp.job(periodicRow(13, `{}`, "", at), nil)).Fingerprint)

	notPeriodic := row(14, "digest", `{}`)
	notPeriodic.Metadata = []byte(`{"periodic":false,"note":"periodic"}`)
	require.True(t, keyed(cfg.job(notPeriodic, nil)).DefaultKey)
}

// TestUnusablePeriodicMetadataKeysTheJobByItsID: a periodic job whose
// recorded occurrence is not an RFC 3339 string, or whose periodic job ID is
// not a string, is keyed by its job ID (it still runs once) rather than by
// its args, and Config.job says which field is unusable; a garbled field
// other than these leaves the occurrence key alone.
func TestUnusablePeriodicMetadataKeysTheJobByItsID(t *testing.T) {
	t.Parallel()
	var cfg Config
	const at = "2024-05-01T00:00:00Z"
	for _, tc := range []struct{ metadata, field string }{
		{`{"periodic":true,"jobonce_occurrence":12345}`, metadataOccurrence},
		{`{"periodic":true,"jobonce_occurrence":{"x":1}}`, metadataOccurrence},
		{`{"periodic":true,"jobonce_occurrence":null}`, metadataOccurrence},
		{`{"periodic":true,"jobonce_occurrence":""}`, metadataOccurrence},
		{`{"periodic":true,"jobonce_occurrence":"yesterday"}`, metadataOccurrence},
		{`{"periodic":true,"river:periodic_job_id":7,"jobonce_occurrence":"` + at + `"}`, jobkey.RiverPeriodicID},
	} {
		r := row(42, "digest", `{}`)
		r.Metadata = []byte(tc.metadata)
		job, unusable := cfg.job(r, nil)
		require.Equal(t, core.Job{Key: "digest:periodic:job:42", Kind: "digest", Source: "river"}, job, tc.metadata)
		require.ErrorContains(t, unusable, `metadata field "`+tc.field+`" holds `, tc.metadata)
	}

	r := row(43, "digest", `{}`)
	r.Metadata = []byte(`{"periodic":true,"jobonce_occurrence":"` + at + `","snoozes":"x"}`)
	job, unusable := cfg.job(r, nil)
	require.NoError(t, unusable)
	require.Equal(t, "digest:periodic:"+at+":"+core.Fingerprint([]byte(`{}`)), job.Key)
	r.Metadata = []byte(`{"periodic":1,"jobonce_occurrence":12345}`)
	job, unusable = cfg.job(r, nil)
	require.NoError(t, unusable)
	require.True(t, job.DefaultKey, "not River's periodic job: the default key")
}

// TestUnusablePeriodicMetadataIsWarnedOnce: jobs keyed by their job ID for
// unusable periodic metadata each run once, and the first is logged at Warn
// on the Guard's Logger, naming the field.
func TestUnusablePeriodicMetadataIsWarnedOnce(t *testing.T) {
	t.Parallel()
	var logs testenv.Records
	mw := MustMiddleware(testenv.MemGuard(t, &core.Config{Logger: logs.Logger()}), nil)
	runs := 0
	for id := range int64(3) {
		r := row(100+id, "digest", `{}`)
		r.Metadata = []byte(`{"periodic":true,"jobonce_occurrence":12345}`)
		require.NoError(t, mw.Work(context.Background(), r, func(context.Context) error { runs++; return nil }))
	}
	require.Equal(t, 3, runs, "each job, keyed by its ID, ran")
	var warnings []testenv.Record
	for _, r := range logs.All() {
		if r.Level == slog.LevelWarn {
			warnings = append(warnings, r)
		}
	}
	require.Len(t, warnings, 1)
	require.Contains(t, warnings[0].Message, `metadata field "jobonce_occurrence" holds 12345, not an RFC 3339 time`)
	require.Contains(t, warnings[0].Message, "keyed by its job ID")
	require.Equal(t, "100", warnings[0].Attrs["job_id"])
}

// TestInsertOverwritesAnUnusableOccurrence: acting at insert, the middleware
// records the occurrence of a periodic job whose metadata held an unusable
// one, in its place.
func TestInsertOverwritesAnUnusableOccurrence(t *testing.T) {
	t.Parallel()
	mw := MustMiddleware(testenv.MemGuard(t, nil), nil).(rivertype.JobInsertMiddleware)
	at := time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)
	for _, md := range []string{`{"periodic":true,"jobonce_occurrence":5}`, `{"periodic":true,"jobonce_occurrence":{"x":1}}`} {
		p := &rivertype.JobInsertParams{Args: noopArgs{}, Kind: "riveronce_noop", ScheduledAt: &at, Metadata: []byte(md)}
		_, err := mw.InsertMany(context.Background(), []*rivertype.JobInsertParams{p},
			func(context.Context) ([]*rivertype.JobInsertResult, error) { return nil, nil })
		require.NoError(t, err)
		require.JSONEq(t, `{"periodic":true,"jobonce_occurrence":"2024-05-01T00:00:00Z"}`, string(p.Metadata), md)
	}
}

// TestInsertRecordsThePeriodicOccurrence: acting at insert, the middleware
// records the ScheduledAt River's periodic job enqueuer gave a job, in UTC to
// the microsecond, and leaves other jobs alone.
func TestInsertRecordsThePeriodicOccurrence(t *testing.T) {
	t.Parallel()
	mw := MustMiddleware(testenv.MemGuard(t, nil), nil).(rivertype.JobInsertMiddleware)
	at := time.Date(2024, 5, 1, 12, 0, 0, 123456789, time.FixedZone("CEST", 2*3600))
	periodic := &rivertype.JobInsertParams{Args: noopArgs{}, Kind: "riveronce_noop", ScheduledAt: &at,
		Metadata: []byte(`{"periodic":true,"river:periodic_job_id":"p"}`)}
	keyed := &rivertype.JobInsertParams{Args: keyedArgs{User: "7"}, Kind: "welcome_email", ScheduledAt: &at,
		Metadata: []byte(`{"periodic":true}`)}
	plain := &rivertype.JobInsertParams{Args: noopArgs{}, Kind: "riveronce_noop", ScheduledAt: &at, Metadata: []byte(`{}`)}
	_, err := mw.InsertMany(context.Background(), []*rivertype.JobInsertParams{periodic, keyed, plain},
		func(context.Context) ([]*rivertype.JobInsertResult, error) { return nil, nil })
	require.NoError(t, err)
	require.JSONEq(t, `{"periodic":true,"river:periodic_job_id":"p","jobonce_occurrence":"2024-05-01T10:00:00.123456Z"}`, string(periodic.Metadata))
	require.JSONEq(t, `{"periodic":true,"jobonce_occurrence":"2024-05-01T10:00:00.123456Z","jobonce_key":"email:welcome:7"}`, string(keyed.Metadata))
	require.JSONEq(t, `{}`, string(plain.Metadata))
}

// periodicArgs are constant: every occurrence has the same args.
type periodicArgs struct{}

func (periodicArgs) Kind() string { return "riveronce_periodic" }

// periodicWorker writes one effect per run, keyed by the occurrence recorded
// in the job's metadata.
type periodicWorker struct {
	river.WorkerDefaults[periodicArgs]
	effects func(ctx context.Context, key string, jobID int64) error
}

func (w *periodicWorker) Work(ctx context.Context, job *river.Job[periodicArgs]) error {
	m, _ := jobkey.ReadPeriodic(job.Metadata)
	return w.effects(ctx, "occurrence "+m.Occurrence, job.ID)
}

// TestPeriodicJobRunsEveryOccurrence: a River periodic job with constant
// args, under the middleware with its defaults, runs every occurrence, each
// once; a copy of an occurrence (as a new leader would insert it) is
// completed as a duplicate without running.
func TestPeriodicJobRunsEveryOccurrence(t *testing.T) {
	testenv.Short(t)
	t.Parallel()
	pool, schema := riverSchema(t)
	var outs testenv.Outcomes
	g := testenv.RedisGuard(t, &core.Config{MaxRetryAfter: 200 * time.Millisecond, Observer: outs.Observe})
	workers := river.NewWorkers()
	river.AddWorker(workers, &periodicWorker{effects: func(ctx context.Context, key string, id int64) error {
		return insertEffect(ctx, pool, key, id)
	}})
	cfg := clientConfig(schema, workers, 4)
	cfg.Middleware = []rivertype.Middleware{MustMiddleware(g, nil)}
	cfg.PeriodicJobs = []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(250*time.Millisecond),
		func() (river.JobArgs, *river.InsertOpts) { return periodicArgs{}, nil }, &river.PeriodicJobOpts{RunOnStart: true})}
	client := startClient(t, pool, cfg)
	ctx := context.Background()

	completed := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&n))
		return n
	}
	require.Eventually(t, func() bool { return completed() >= 1 }, 30*time.Second, 20*time.Millisecond, "no occurrence ran")
	var first string
	require.NoError(t, pool.QueryRow(ctx, `SELECT metadata->>'jobonce_occurrence' FROM river_job WHERE state = 'completed' ORDER BY id LIMIT 1`).Scan(&first))
	require.NotEmpty(t, first, "the middleware recorded the occurrence at insert")
	copyJob, err := insertClient(t, pool, schema).Insert(ctx, periodicArgs{}, &river.InsertOpts{
		Metadata: []byte(`{"periodic":true,"jobonce_occurrence":"` + first + `"}`),
	})
	require.NoError(t, err)
	copyDone := func() bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE id = $1 AND state = 'completed'`, copyJob.Job.ID).Scan(&n))
		return n == 1
	}
	require.Eventually(t, func() bool { return completed() >= 5 && copyDone() }, 30*time.Second, 20*time.Millisecond, "occurrences did not run")
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, client.Stop(stopCtx))

	var occurrences, unrecorded int
	require.NoError(t, pool.QueryRow(ctx, `SELECT
		count(DISTINCT metadata->>'jobonce_occurrence') FILTER (WHERE state = 'completed'),
		count(*) FILTER (WHERE metadata->>'jobonce_occurrence' IS NULL)
		FROM river_job`).Scan(&occurrences, &unrecorded))
	require.GreaterOrEqual(t, occurrences, 3)
	require.Zero(t, unrecorded)
	effects := readEffectStats(t, pool)
	require.Equal(t, effectStats{Rows: occurrences, Keys: occurrences}, effects, "every occurrence ran, each once")
	var copyEffects int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM effects WHERE job_id = $1`, copyJob.Job.ID).Scan(&copyEffects))
	require.Zero(t, copyEffects, "the copy of an occurrence did not run")
	require.EqualValues(t, 1, outs.Get(core.Duplicate))
	t.Logf("%d occurrences ran once each", occurrences)
}

// TestFirstSkipIsLoggedAtInfo: through a real River client, the first copy
// of a kind skipped under the default key is logged at Info, naming
// riveronce's settings; a later one at Debug; copies under a Keyer's key
// never at Info.
func TestFirstSkipIsLoggedAtInfo(t *testing.T) {
	testenv.Short(t)
	t.Parallel()
	pool, schema := riverSchema(t)
	var logs testenv.Records
	g := testenv.RedisGuard(t, &core.Config{MaxRetryAfter: 200 * time.Millisecond, Logger: logs.Logger()})
	workers := river.NewWorkers()
	river.AddWorker(workers, &effectWorker{pool: pool})
	river.AddWorker(workers, &keyedWorker{pool: pool})
	cfg := clientConfig(schema, workers, 1) // one at a time: each copy finds the one before done
	cfg.Middleware = []rivertype.Middleware{MustMiddleware(g, nil)}
	client := startClient(t, pool, cfg)
	ctx := context.Background()
	for i := range 3 {
		_, err := client.InsertMany(ctx, []river.InsertManyParams{{Args: effectArgs{N: 1}}, {Args: keyedArgs{User: "9"}}})
		require.NoError(t, err)
		waitFinished(t, pool, 2*(i+1), 30*time.Second)
	}

	var levels []slog.Level
	for _, r := range logs.Where("kind", effectArgs{}.Kind()) {
		if r.Attrs["outcome"] == "duplicate" {
			levels = append(levels, r.Level)
			if r.Level == slog.LevelInfo {
				require.Contains(t, r.Message, "riveronce: set Config.Key")
				testenv.RequireLag(t, r, time.Minute)
			}
		}
	}
	require.Equal(t, []slog.Level{slog.LevelInfo, slog.LevelDebug}, levels)
	var keyed int
	for _, r := range logs.Where("kind", keyedArgs{}.Kind()) {
		require.Equal(t, slog.LevelDebug, r.Level, "a Keyer's key: %s", r.Message)
		keyed++
	}
	require.Equal(t, 3, keyed, "ran once, skipped twice")
	require.Equal(t, effectStats{Rows: 2, Keys: 2}, readEffectStats(t, pool))
}
