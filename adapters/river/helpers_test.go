package riveronce

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/pgstore"
	"github.com/jobonce/jobonce/internal/pgtest"
)

// effectArgs is a test job: its effect is one row in the effects table,
// which has no unique constraint, so a duplicate effect shows as a second row.
type effectArgs struct {
	N     int           `json:"n"`
	Sleep time.Duration `json:"sleep,omitempty"`
}

func (effectArgs) Kind() string { return "riveronce_effect" }

func (a effectArgs) key() string { return fmt.Sprintf("effect-%d", a.N) }

// effectWorker writes the effect after sleeping.
type effectWorker struct {
	river.WorkerDefaults[effectArgs]
	pool *pgxpool.Pool
}

func (w *effectWorker) Work(ctx context.Context, job *river.Job[effectArgs]) error {
	if job.Args.Sleep > 0 {
		time.Sleep(job.Args.Sleep)
	}
	return insertEffect(ctx, w.pool, job.Args.key(), job.ID)
}

const effectsDDL = `CREATE TABLE effects (key text NOT NULL, job_id bigint NOT NULL, at timestamptz NOT NULL DEFAULT now())`

func insertEffect(ctx context.Context, pool *pgxpool.Pool, key string, jobID int64) error {
	_, err := pool.Exec(context.WithoutCancel(ctx), `INSERT INTO effects (key, job_id) VALUES ($1, $2)`, key, jobID)
	return err
}

// riverSchema returns a pool on a schema of its own holding River's tables
// and the effects table.
func riverSchema(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	pool, schema := pgtest.Postgres(t)
	ctx := context.Background()
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema, Logger: quietLogger()})
	require.NoError(t, err)
	_, err = migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, effectsDDL)
	require.NoError(t, err)
	return pool, schema
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// quickRetry retries failed and rescued jobs after 50ms.
type quickRetry struct{}

func (quickRetry) NextRetry(*rivertype.JobRow) time.Time {
	return time.Now().Add(50 * time.Millisecond)
}

// clientConfig is a River config for tests: fast fetches, quick retries.
func clientConfig(schema string, workers *river.Workers, maxWorkers int) *river.Config {
	return &river.Config{
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
		Logger:            quietLogger(),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
		RetryPolicy:       quickRetry{},
		Schema:            schema,
		TestOnly:          true,
		Workers:           workers,
	}
}

// startClient starts a River client and stops it at cleanup.
func startClient(t testing.TB, pool *pgxpool.Pool, cfg *river.Config) *river.Client[pgx.Tx] {
	t.Helper()
	client, err := river.NewClient(riverpgxv5.New(pool), cfg)
	require.NoError(t, err)
	require.NoError(t, client.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(ctx)
	})
	return client
}

// insertClient returns a client that only inserts, with the given middleware.
func insertClient(t testing.TB, pool *pgxpool.Pool, schema string, mw ...rivertype.Middleware) *river.Client[pgx.Tx] {
	t.Helper()
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: quietLogger(), Schema: schema, Middleware: mw})
	require.NoError(t, err)
	return client
}

// jobStats summarises the jobs table.
type jobStats struct {
	Total, Completed, Unfinished, Cancelled, Discarded int
	MaxAttempt, Snoozed, WithErrors                    int
}

func readJobStats(t testing.TB, pool *pgxpool.Pool) jobStats {
	t.Helper()
	s, err := queryJobStats(pool)
	require.NoError(t, err)
	return s
}

func queryJobStats(pool *pgxpool.Pool) (jobStats, error) {
	var s jobStats
	err := pool.QueryRow(context.Background(), `SELECT count(*),
		count(*) FILTER (WHERE state = 'completed'),
		count(*) FILTER (WHERE state NOT IN ('completed', 'cancelled', 'discarded')),
		count(*) FILTER (WHERE state = 'cancelled'),
		count(*) FILTER (WHERE state = 'discarded'),
		coalesce(max(attempt), 0),
		count(*) FILTER (WHERE coalesce((metadata->>'snoozes')::int, 0) > 0),
		count(*) FILTER (WHERE coalesce(array_length(errors, 1), 0) > 0)
		FROM river_job`).Scan(&s.Total, &s.Completed, &s.Unfinished, &s.Cancelled, &s.Discarded,
		&s.MaxAttempt, &s.Snoozed, &s.WithErrors)
	return s, err
}

// effectStats counts effects: rows, distinct keys, and keys with more than one row.
type effectStats struct{ Rows, Keys, Duplicated int }

func readEffectStats(t testing.TB, pool *pgxpool.Pool) effectStats {
	t.Helper()
	var s effectStats
	err := pool.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT key),
		(SELECT count(*) FROM (SELECT key FROM effects GROUP BY key HAVING count(*) > 1) d) FROM effects`).
		Scan(&s.Rows, &s.Keys, &s.Duplicated)
	require.NoError(t, err)
	return s
}

// waitFinished waits until no job is left to work.
func waitFinished(t testing.TB, pool *pgxpool.Pool, want int, timeout time.Duration) jobStats {
	t.Helper()
	var s jobStats
	require.Eventually(t, func() bool {
		var err error
		s, err = queryJobStats(pool)
		return err == nil && s.Total == want && s.Unfinished == 0
	}, timeout, 20*time.Millisecond, "jobs still unfinished")
	return s
}

func riverDriver(pool *pgxpool.Pool) *riverpgxv5.Driver { return riverpgxv5.New(pool) }

// txGuard returns the transactional mode of a Guard on store.
func txGuard(t testing.TB, store *pgstore.Store) *core.TxGuard[pgx.Tx] {
	t.Helper()
	g, err := core.New(store, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })
	tg, err := core.NewTxGuard[pgx.Tx](g)
	require.NoError(t, err)
	return tg
}

// keyed is the job of Config.job, without what it says of unusable periodic
// metadata.
func keyed(job core.Job, _ error) core.Job { return job }
