package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/pgstore"
	"github.com/jobonce/jobonce/internal/pgtest"
	"github.com/jobonce/jobonce/internal/testenv"
)

// pgEnv is a Guard on a pgstore table in a schema of its own, and the
// command's arguments for it.
type pgEnv struct {
	pool   *pgxpool.Pool
	schema string
	store  *pgstore.Store
	guard  *core.Guard
	lease  time.Duration
}

func newPgEnv(t *testing.T, cfg core.Config) pgEnv {
	t.Helper()
	pool, schema := pgtest.Postgres(t)
	store, err := pgstore.New(context.Background(), pool, &pgstore.Config{Schema: schema, Migrate: true})
	require.NoError(t, err)
	g, err := core.New(store, &cfg)
	require.NoError(t, err)
	lease := cfg.Lease
	if lease == 0 {
		lease = 30 * time.Second
	}
	return pgEnv{pool: pool, schema: schema, store: store, guard: g, lease: lease}
}

// args are the command's arguments for e's table, then a.
func (e pgEnv) args(a ...string) []string {
	return append([]string{"-postgres", pgtest.DatabaseURL(), "-schema", e.schema}, a...)
}

func (e pgEnv) run(t *testing.T, a ...string) cliRun {
	t.Helper()
	return runCLI(t, nil, nil, e.args(a...)...)
}

// state returns the state of key as the command's inspect reads it.
func (e pgEnv) state(t *testing.T, key string) record {
	t.Helper()
	stored, err := e.guard.StoredKey(key)
	require.NoError(t, err)
	keys := e.keys(t)
	rec, err := keys.inspect(context.Background(), stored)
	require.NoError(t, err)
	return rec
}

// expire moves the end of key's lease or retention a minute back, as if
// that minute had passed.
func (e pgEnv) expire(t *testing.T, key string) {
	t.Helper()
	stored, err := e.guard.StoredKey(key)
	require.NoError(t, err)
	tag, err := e.pool.Exec(context.Background(), "UPDATE jobonce_keys SET expires_at = clock_timestamp() - interval '1 minute' WHERE key = $1", []byte(stored))
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
}

func (e pgEnv) keys(t *testing.T) *pgKeys {
	t.Helper()
	keys, err := openPostgres(context.Background(), pgtest.DatabaseURL(), e.schema, defaultTable)
	require.NoError(t, err)
	t.Cleanup(keys.close)
	return keys
}

func TestPostgresInspectShowsAClaimAndADoneMarker(t *testing.T) {
	e := newPgEnv(t, core.Config{Lease: time.Minute})
	r := e.run(t, "inspect", "job-1")
	requireOneErrorLine(t, r, "inspect: nothing is stored under the key")
	require.Contains(t, r.stdout, "state: absent")

	stop := make(chan struct{})
	started, done := holdJob(t, e.guard, "job-1", stop)
	<-started
	stored, err := e.guard.StoredKey("job-1")
	require.NoError(t, err)
	r = e.run(t, "inspect", "job-1")
	require.Zero(t, r.status, "%s", r)
	require.Contains(t, r.stdout, "stored key: "+storedForm(stored))
	require.Contains(t, r.stdout, "state: running (lease ends in ")
	require.Contains(t, r.stdout, ", held for ", "a claim is dated by its fence")
	close(stop)
	require.Equal(t, core.Ran, <-done)

	_, err = e.guard.Run(context.Background(), core.Job{Key: "job-2"}, func(context.Context) ([]byte, error) { return []byte("receipt"), nil })
	require.NoError(t, err)
	r = e.run(t, "inspect", "job-2")
	require.Zero(t, r.status, "%s", r)
	require.Contains(t, r.stdout, "state: done (kept for 23h59m")
	require.Contains(t, r.stdout, "result 7 bytes")
}

func TestPostgresReleaseRefusesALiveClaimUntilForced(t *testing.T) {
	e := newPgEnv(t, core.Config{Lease: 900 * time.Millisecond})
	stop := make(chan struct{})
	started, done := holdJob(t, e.guard, "job-1", stop)
	jobCtx := <-started
	before := e.state(t, "job-1")

	r := e.run(t, "release", "job-1", "-lease", "900ms")
	requireOneErrorLine(t, r, "release: refused: the holder is alive and renewing its claim")
	require.Contains(t, r.stderr, "cut off from PostgreSQL")
	require.Contains(t, r.stdout, "watching the lease")
	after := e.state(t, "job-1")
	require.Equal(t, driver.StateRunning, after.State)
	require.Equal(t, before.Token, after.Token)
	require.NoError(t, jobCtx.Err())
	_, err := e.guard.Do(context.Background(), "job-1", func(context.Context) error { return nil })
	require.ErrorIs(t, err, core.ErrRunning, "no second copy runs")

	r = e.run(t, "-force", "release", "-watch", "0", "job-1")
	require.Zero(t, r.status, "%s", r)
	require.Contains(t, r.stdout, "released although not watched (-watch 0)")
	require.Equal(t, driver.State(0), e.state(t, "job-1").State)
	require.Equal(t, core.Ran, runJob(t, e.guard, "job-1"), "the next copy runs")
	close(stop)
	require.Equal(t, core.LeaseLost, <-done, "the released holder learns it lost its claim")
}

func TestPostgresReleaseRefusesADeadClaimNeverRenewedUntilForced(t *testing.T) {
	e := newPgEnv(t, core.Config{})
	stored, err := e.guard.StoredKey("job-1")
	require.NoError(t, err)
	_, err = e.store.Claim(context.Background(), driver.ClaimRequest{Key: stored, Token: driver.NewToken(), Lease: time.Minute})
	require.NoError(t, err)

	r := e.run(t, "release", "job-1", "-watch", "50ms", "-lease", "1m")
	requireOneErrorLine(t, r, "never renewed")
	require.Contains(t, r.stderr, "-force deletes it now")
	require.Equal(t, driver.StateRunning, e.state(t, "job-1").State)

	r = e.run(t, "release", "job-1", "-watch", "50ms", "-lease", "1m", "-force")
	require.Zero(t, r.status, "%s", r)
	require.Contains(t, r.stdout, "released although no renewal seen")
	r = e.run(t, "inspect", "job-1")
	require.Contains(t, r.stdout, "state: absent (its claim's row expired ", "a released claim's row stays until pruned: %s", r)
	require.Equal(t, core.Ran, runJob(t, e.guard, "job-1"))
}

func TestPostgresForgetDeletesADoneMarkerOnlyOnYes(t *testing.T) {
	e := newPgEnv(t, core.Config{})
	require.Equal(t, core.Ran, runJob(t, e.guard, "job-1"))

	r := runCLI(t, strings.NewReader("n\n"), nil, e.args("forget", "job-1")...)
	requireOneErrorLine(t, r, `forget: not confirmed (answered "n"`)
	require.Contains(t, r.stdout, "delete? [y/N]")
	require.Equal(t, core.Duplicate, runJob(t, e.guard, "job-1"))

	r = e.run(t, "forget", "job-1", "-yes")
	require.Zero(t, r.status, "%s", r)
	require.Contains(t, r.stdout, "deleted: the next copy of the job runs")
	require.Equal(t, core.Ran, runJob(t, e.guard, "job-1"))

	// A transactional record is a done marker too.
	txg, err := core.NewTxGuard[pgx.Tx](e.guard)
	require.NoError(t, err)
	_, err = txg.Do(context.Background(), "job-2", func(context.Context, pgx.Tx) error { return nil })
	require.NoError(t, err)
	r = runCLI(t, strings.NewReader("y\n"), nil, e.args("forget", "job-2")...)
	require.Zero(t, r.status, "%s", r)
	require.Equal(t, core.Ran, runJob(t, e.guard, "job-2"))
}

func TestPostgresForgetRefusesARunningClaim(t *testing.T) {
	e := newPgEnv(t, core.Config{Lease: time.Minute})
	stop := make(chan struct{})
	started, done := holdJob(t, e.guard, "job-1", stop)
	<-started
	r := e.run(t, "forget", "-yes", "job-1")
	requireOneErrorLine(t, r, "forget: the key holds a running claim, not a done marker")
	require.Equal(t, driver.StateRunning, e.state(t, "job-1").State)
	close(stop)
	require.Equal(t, core.Ran, <-done)
}

// The UPDATE ends only the row forget showed: a claim or a done marker
// written since is kept.
func TestPostgresForgetKeepsWhatWasWrittenSinceItWasRead(t *testing.T) {
	e := newPgEnv(t, core.Config{Lease: time.Minute})
	require.Equal(t, core.Ran, runJob(t, e.guard, "job-1"))
	stored, err := e.guard.StoredKey("job-1")
	require.NoError(t, err)
	keys := e.keys(t)
	ctx := context.Background()
	shown, err := keys.inspect(ctx, stored)
	require.NoError(t, err)
	require.Equal(t, driver.StateDone, shown.State)

	deleted, err := keys.forget(ctx, stored, shown)
	require.NoError(t, err)
	require.True(t, deleted)
	stop := make(chan struct{})
	started, done := holdJob(t, e.guard, "job-1", stop)
	<-started
	deleted, err = keys.forget(ctx, stored, shown)
	require.NoError(t, err)
	require.False(t, deleted, "a claim taken since is kept")
	require.Equal(t, driver.StateRunning, e.state(t, "job-1").State)
	close(stop)
	require.Equal(t, core.Ran, <-done)

	deleted, err = keys.forget(ctx, stored, shown)
	require.NoError(t, err)
	require.False(t, deleted, "a marker written since is kept")
	require.Equal(t, driver.StateDone, e.state(t, "job-1").State)
}

func TestPostgresAbsentKeyHints(t *testing.T) {
	e := newPgEnv(t, core.Config{})
	require.Equal(t, core.Ran, runJob(t, e.guard, "job-1"))
	e.expire(t, "job-1")
	r := e.run(t, "inspect", "job-1")
	requireOneErrorLine(t, r, "inspect: nothing is stored under the key")
	require.Contains(t, r.stdout, "state: absent (its done row expired 1m0")
	require.Contains(t, r.stdout, `in PostgreSQL table "`+e.schema+`"."jobonce_keys" in database test at 127.0.0.1:5432`)
	require.Contains(t, r.stdout, "hint: the job ran, and its done marker outlived the Guard's Config.Retention or was forgotten")

	r = e.run(t, "forget", "job-9")
	requireOneErrorLine(t, r, "forget: nothing is stored under the key")
	require.Contains(t, r.stdout, "  - the Guard uses another database or table (-postgres, -schema, -table: its pgstore.Config.Schema and Table);\n", "%s", r)

	plain := newPgEnv(t, core.Config{PlainKeys: true})
	require.Equal(t, core.Ran, runJob(t, plain.guard, "job-1"))
	r = plain.run(t, "release", "job-1")
	requireOneErrorLine(t, r, "release: nothing is stored under the key")
	require.Contains(t, r.stdout, "hint: found under -plain", "%s", r)
}

func TestPostgresCheckReportsTheServerAndTheTable(t *testing.T) {
	e := newPgEnv(t, core.Config{})
	r := e.run(t, "check", "-fail-on", "none")
	require.Zero(t, r.status, "%s", r)
	for _, want := range []string{
		"server PostgreSQL ", " at 127.0.0.1:5432, database test (primary, up ",
		"  durability: fsync on, synchronous_commit on",
		"  replication: 0 standbys streaming",
		"  RISK: replication: primary with no standby streaming",
		`table "` + e.schema + `"."jobonce_keys": in schema "` + e.schema + `"`,
		"  fence column: present",
		`  expiry index "jobonce_keys_expires_at_idx": valid`,
		"  expired rows waiting for Prune: none",
	} {
		require.Contains(t, r.stdout, want, "%s", r)
	}

	// The test server has no standby: a replication risk, exit 2 by default.
	r = e.run(t, "check")
	require.Equal(t, 2, r.status, "%s", r)
	require.Equal(t, "jobonce: risk found: replication (-fail-on)\n", r.stderr)
	r = runCLI(t, nil, nil, "check", "-postgres", withParam(pgtest.DatabaseURL(), "synchronous_commit=off"), "-schema", e.schema, "-fail-on", "persistence")
	require.Equal(t, 2, r.status, "%s", r)
	require.Contains(t, r.stdout, "RISK: persistence: synchronous_commit off")
	require.Equal(t, "jobonce: risk found: persistence (-fail-on)\n", r.stderr)

	require.Equal(t, core.Ran, runJob(t, e.guard, "job-1"))
	require.Equal(t, core.Ran, runJob(t, e.guard, "job-2"))
	e.expire(t, "job-1")
	e.expire(t, "job-2")
	r = e.run(t, "check", "-fail-on", "none")
	require.Zero(t, r.status, "%s", r)
	// The two jobs', and the row of the key the checks above claimed and
	// released, one for them all.
	// e.expire set them to have expired a minute ago; the check runs a
	// few seconds later on a loaded machine.
	require.Regexp(t, `\n  expired rows waiting for Prune: 3, the oldest expired 1m[0-9]+s ago \(`, r.stdout)

	_, err := e.pool.Exec(context.Background(), "DROP INDEX jobonce_keys_expires_at_idx")
	require.NoError(t, err)
	r = e.run(t, "check", "-fail-on", "none")
	require.Zero(t, r.status, "%s", r)
	require.Contains(t, r.stdout, `  expiry index "jobonce_keys_expires_at_idx": missing: Prune scans the whole table; pgstore.Migrate builds it`)

	r = e.run(t, "check", "-table", "nosuch")
	requireOneErrorLine(t, r, `jobonce: check: table "`+e.schema+`"."nosuch" is missing: run pgstore.Migrate`)
	_, err = e.pool.Exec(context.Background(), "CREATE TABLE old_keys (key bytea PRIMARY KEY, token uuid, fingerprint bytea NOT NULL DEFAULT '', result bytea, expires_at timestamptz NOT NULL)")
	require.NoError(t, err)
	r = e.run(t, "check", "-table", "old_keys", "-fail-on", "none")
	requireOneErrorLine(t, r, "has no fence column, which this version needs: run pgstore.Migrate")
	r = e.run(t, "inspect", "-table", "old_keys", "job-1")
	requireOneErrorLine(t, r, "run pgstore.Migrate")
	require.Contains(t, r.stderr, "check -postgres, -schema and -table")
}

func TestTheStoreComesFromTheFlagsThenTheEnvironment(t *testing.T) {
	e := newPgEnv(t, core.Config{})
	require.Equal(t, core.Ran, runJob(t, e.guard, "job-1"))

	r := runCLI(t, nil, []string{"DATABASE_URL=" + pgtest.DatabaseURL()}, "inspect", "job-1", "-schema", e.schema)
	require.Zero(t, r.status, "%s", r)
	require.Contains(t, r.stdout, "state: done", "$DATABASE_URL alone names PostgreSQL")

	r = runCLI(t, nil, []string{"DATABASE_URL=" + pgtest.DatabaseURL(), "REDIS_URL=" + testenv.RedisURL()}, "inspect", "job-1")
	requireOneErrorLine(t, r, "inspect: nothing is stored under the key")
	require.Contains(t, r.stdout, "in Redis database 0", "$REDIS_URL wins over $DATABASE_URL")

	r = runCLI(t, nil, []string{"REDIS_URL=" + testenv.RedisURL()}, e.args("inspect", "job-1")...)
	require.Zero(t, r.status, "%s", r)
	require.Contains(t, r.stdout, "state: done", "-postgres wins over $REDIS_URL")

	r = runCLI(t, nil, nil, "inspect", "job-1", "-redis", testenv.RedisURL(), "-postgres", pgtest.DatabaseURL())
	requireOneErrorLine(t, r, "jobonce: -redis and -postgres name two stores: give one")
	r = runCLI(t, nil, nil, "inspect", "job-1", "-redis", testenv.RedisURL(), "-schema", e.schema)
	requireOneErrorLine(t, r, "jobonce: -schema and -table name a PostgreSQL table")
	r = runCLI(t, nil, nil, e.args("inspect", "job-1", "-table", strings.Repeat("t", 60))...)
	requireOneErrorLine(t, r, "jobonce: -table: jobonce: pgstore: Config.Table")
}

// withParam adds a query parameter to a connection URL, with or without a query.
func withParam(url, param string) string {
	if strings.Contains(url, "?") {
		return url + "&" + param
	}
	return url + "?" + param
}
