package pgstore_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/pgstore"
	"github.com/jobonce/jobonce/internal/pgtest"
)

// holdKey runs a transactional job on key that keeps its transaction open
// (the key's row locked) until release is called, as a long TxGuard job
// does. It returns the job's backend pid; release runs at cleanup too.
func holdKey(t *testing.T, m txMode, key string) (pid int32, release func()) {
	t.Helper()
	entered := make(chan int32, 1)
	hold := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = m.Do(context.Background(), key, func(ctx context.Context, tx pgx.Tx) error {
			var pid int32
			if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
				return err
			}
			entered <- pid
			<-hold
			return nil
		})
	}()
	var once sync.Once
	release = func() { once.Do(func() { close(hold) }); <-done }
	t.Cleanup(release)
	select {
	case pid = <-entered:
	case <-done:
		t.Fatal("the long job did not start")
	case <-time.After(10 * time.Second):
		t.Fatal("the long job did not start within 10s")
	}
	return pid, release
}

// holdRow inserts a row into the keys table in a transaction left open until
// release is called (at cleanup too), and returns the transaction's pid.
func holdRow(t *testing.T, pool *pgxpool.Pool) (pid int32, release func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	var once sync.Once
	release = func() { once.Do(func() { _ = tx.Rollback(ctx) }) }
	t.Cleanup(release)
	_, err = tx.Exec(ctx, "INSERT INTO jobonce_keys (key, expires_at) VALUES ('held', now() + interval '1 hour')")
	require.NoError(t, err)
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	return pid, release
}

// migrating starts New with Migrate on pool and cfg; the returned channel
// gets its error. The call ends by cleanup.
func migrating(t *testing.T, pool *pgxpool.Pool, cfg pgstore.Config) <-chan error {
	t.Helper()
	cfg.Migrate = true
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	errc := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := pgstore.New(ctx, pool, &cfg)
		errc <- err
	}()
	t.Cleanup(func() { cancel(); <-done })
	return errc
}

// lockWaiters counts the backends of application name app waiting for a lock
// of locktype.
func lockWaiters(t *testing.T, admin *pgxpool.Pool, app, locktype string) int {
	t.Helper()
	return count(t, admin, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE NOT l.granted AND l.locktype = $2 AND a.application_name = $1`, app, locktype)
}

// waitUntil polls cond until it holds, failing the test after within.
func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// appPool returns a pool on schema whose connections carry a test-unique
// application_name, so their locks can be told apart in pg_locks.
func appPool(t *testing.T, schema, role string) (*pgxpool.Pool, string) {
	t.Helper()
	app := "jobonce-" + role + "-" + schema
	return pgtest.PostgresOn(t, schema, 4, "application_name", app), app
}

func TestNewWithMigrateOnAnUpToDateTableNeitherWaitsForAnOpenTransactionNorStallsClaims(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	pool, schema := pgtest.Postgres(t)
	s := migratedStore(t, pool, nil)
	_, _ = holdKey(t, txOf(t, s), "long-job")

	// Another worker starts, and migrates, while the job's transaction is open.
	other, app := appPool(t, schema, "deploy")
	started := time.Now()
	errc := migrating(t, other, pgstore.Config{})
	var newErr error
	finished := false
	waitUntil(t, 10*time.Second, "New returns or waits for a lock", func() bool {
		select {
		case newErr = <-errc:
			finished = true
			return true
		default:
			return lockWaiters(t, pool, app, "relation") > 0
		}
	})

	// A claim of a free key, meanwhile, answers at once.
	g, err := core.New(s, &core.Config{StoreTimeout: 3 * time.Second})
	require.NoError(t, err)
	claimed := time.Now()
	out, err := g.Do(ctx, "free-key", func(context.Context) error { return nil })
	require.NoError(t, err)
	require.Equal(t, core.Ran, out)
	require.Less(t, time.Since(claimed), time.Second, "the claim waited behind the migration")

	if !finished {
		select {
		case newErr = <-errc:
		case <-time.After(5 * time.Second):
			t.Fatal("New with Migrate on an up-to-date table waits for the open transaction")
		}
	}
	require.NoError(t, newErr)
	t.Logf("New with Migrate took %s, the claim %s", time.Since(started), time.Since(claimed))
	require.Less(t, time.Since(started), 2*time.Second, "New took its time")
	require.Zero(t, lockWaiters(t, pool, app, "relation"))
}

// The expiry index is built concurrently: the build waits out a
// transactional job's open transaction, past MigrateLockTimeout (only the
// caller's context bounds it), while claims go on, and completes once the
// job ends.
func TestMigrationBuildingTheIndexWaitsOutAnOpenTransactionWithoutStallingClaims(t *testing.T) {
	t.Parallel()
	const bound = 300 * time.Millisecond
	ctx := ctxT(t)
	pool, schema := pgtest.Postgres(t)
	s := migratedStore(t, pool, nil)
	_, err := pool.Exec(ctx, "DROP INDEX jobonce_keys_expires_at_idx")
	require.NoError(t, err)
	_, release := holdKey(t, txOf(t, s), "long-job")

	other, app := appPool(t, schema, "deploy")
	started := time.Now()
	errc := migrating(t, other, pgstore.Config{MigrateLockTimeout: bound})
	waitUntil(t, 10*time.Second, "the build waits out the open transaction", func() bool {
		return lockWaiters(t, pool, app, "virtualxid") > 0 || len(errc) > 0
	})
	g, err := core.New(s, nil)
	require.NoError(t, err)
	out, err := g.Do(ctx, "free-key", func(context.Context) error { return nil })
	require.NoError(t, err, "a claim stalled behind the build")
	require.Equal(t, core.Ran, out)
	waitUntil(t, 10*time.Second, "the build waits past MigrateLockTimeout", func() bool {
		return time.Since(started) > 2*bound || len(errc) > 0
	})
	require.Empty(t, errc, "the build gave up while the transaction was open")

	release()
	select {
	case err := <-errc:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the build did not end once the transaction did")
	}
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM pg_index WHERE indisvalid AND indexrelid = 'jobonce_keys_expires_at_idx'::regclass`))
}

func TestMigrationThatNeedsALockHeldByAnOpenTransactionGivesUpWithinItsBoundNamingTheHolder(t *testing.T) {
	t.Parallel()
	const bound = 300 * time.Millisecond
	for _, tc := range []struct {
		name, lock, change string
		stale              string // makes the table need the change
		held               func(t *testing.T, pool *pgxpool.Pool, s *pgstore.Store) int32
		meanwhile          func(ctx context.Context, pool *pgxpool.Pool, s *pgstore.Store) error
	}{{
		name: "column", lock: "an AccessExclusiveLock", change: "adding column fence to",
		stale: "ALTER TABLE jobonce_keys DROP COLUMN fence",
		held: func(t *testing.T, pool *pgxpool.Pool, _ *pgstore.Store) int32 {
			pid, _ := holdRow(t, pool)
			return pid
		},
		meanwhile: func(ctx context.Context, pool *pgxpool.Pool, _ *pgstore.Store) error {
			// What every statement on the table takes first: ACCESS SHARE.
			_, err := pool.Exec(ctx, "SELECT count(*) FROM jobonce_keys")
			return err
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t)
			pool, schema := pgtest.Postgres(t)
			s := migratedStore(t, pool, nil)
			_, err := pool.Exec(ctx, tc.stale)
			require.NoError(t, err)
			pid := tc.held(t, pool, s)

			other, app := appPool(t, schema, "deploy")
			started := time.Now()
			errc := migrating(t, other, pgstore.Config{MigrateLockTimeout: bound})
			waitUntil(t, 10*time.Second, "the migration waits for its lock", func() bool {
				return lockWaiters(t, pool, app, "relation") > 0 || len(errc) > 0
			})

			// Work on the table queued behind the migration goes on within the bound.
			queued := time.Now()
			require.NoError(t, tc.meanwhile(ctx, pool, s))
			waited := time.Since(queued)
			require.Less(t, waited, bound+time.Second, "work stalled behind the migration past its bound")

			var newErr error
			select {
			case newErr = <-errc:
			case <-time.After(10 * time.Second):
				t.Fatal("New with Migrate waits for the open transaction past its bound")
			}
			t.Logf("New gave up after %s; work queued behind it answered after %s", time.Since(started), waited)
			require.Less(t, time.Since(started), bound+2*time.Second)
			require.ErrorIs(t, newErr, pgstore.ErrMigrationBlocked)
			for _, want := range []string{
				tc.change + ` "jobonce_keys" needs ` + tc.lock,
				"not granted within 300ms (Config.MigrateLockTimeout",
				"held by pid " + strconv.Itoa(int(pid)) + " (RowExclusiveLock, idle in transaction, in a transaction open since ",
				"run the migration again when th", // that transaction ends, or those (a claim let through since)
				"SQLSTATE 55P03",
			} {
				require.ErrorContains(t, newErr, want)
			}
		})
	}
}

func TestMigrationsWithAndWithoutSchemaSerialiseOnOneAdvisoryLock(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, first, second string }{
		{"schema unset first", "", "set"},
		{"schema set first", "set", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t)
			pool, schema := pgtest.Postgres(t)
			migratedStore(t, pool, nil)
			_, err := pool.Exec(ctx, "ALTER TABLE jobonce_keys DROP COLUMN fence")
			require.NoError(t, err)
			_, release := holdRow(t, pool)
			cfgFor := func(which string) pgstore.Config {
				if which == "set" {
					return pgstore.Config{Schema: schema}
				}
				return pgstore.Config{}
			}
			// A pool whose search_path leads to the schema, and one whose does not.
			poolFor := func(which, role string) (*pgxpool.Pool, string) {
				if which == "set" {
					app := "jobonce-" + role + "-" + schema
					return pgtest.PostgresOn(t, "public", 4, "application_name", app), app
				}
				return appPool(t, schema, role)
			}

			firstPool, firstApp := poolFor(tc.first, "first")
			first := cfgFor(tc.first)
			first.MigrateLockTimeout = time.Minute
			firstErr := migrating(t, firstPool, first)
			waitUntil(t, 10*time.Second, "the first migration waits for the table", func() bool {
				return lockWaiters(t, pool, firstApp, "relation") > 0
			})

			// The second waits for the first's advisory lock, not for the table.
			secondPool, secondApp := poolFor(tc.second, "second")
			second := cfgFor(tc.second)
			second.MigrateLockTimeout = 200 * time.Millisecond
			err = <-migrating(t, secondPool, second)
			require.ErrorIs(t, err, pgstore.ErrMigrationBlocked)
			require.ErrorContains(t, err, "waiting for the advisory lock that serialises migrations of")
			require.ErrorContains(t, err, "(ExclusiveLock, ")
			require.Zero(t, lockWaiters(t, pool, secondApp, "relation"))

			// Once the transaction ends, the first migrates and the second finds nothing to do.
			release()
			require.NoError(t, <-firstErr)
			second.MigrateLockTimeout = 0
			require.NoError(t, <-migrating(t, secondPool, second))
			require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM information_schema.columns
				WHERE table_schema = $1 AND table_name = 'jobonce_keys' AND column_name = 'fence'`, schema))
		})
	}
}

func TestMigrateRunsAtReadCommittedWhateverThePoolsDefault(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	_, schema := pgtest.Postgres(t)
	for _, level := range []string{"repeatable read", "serializable"} {
		pool := pgtest.PostgresOn(t, schema, 8, "default_transaction_isolation", level)
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Go(func() { errs[i] = pgstore.Migrate(ctx, pool, nil) })
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err, level)
		}
		_, err := pool.Exec(ctx, "DROP TABLE jobonce_keys")
		require.NoError(t, err)
	}
}

// indexRows is how many rows the index build tests fill the table with: a
// build of them, at maintenance_work_mem 1MB, outlasts a claim's StoreTimeout.
const indexRows = 1000000

func TestMigrationBuildingTheIndexLetsClaimsOfFreeKeysAnswerWithinLockTimeout(t *testing.T) {
	t.Parallel()
	const lockTimeout, storeTimeout = 100 * time.Millisecond, 300 * time.Millisecond
	ctx := ctxT(t)
	pool, schema := pgtest.Postgres(t)
	s := migratedStore(t, pool, &pgstore.Config{LockTimeout: lockTimeout})
	_, err := pool.Exec(ctx, `INSERT INTO jobonce_keys (key, token, fingerprint, result, expires_at, fence)
		SELECT ('filler-' || g)::bytea, NULL, '', NULL, now() + g * interval '1 ms', g FROM generate_series(1, $1::int) g`, indexRows)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "DROP INDEX jobonce_keys_expires_at_idx")
	require.NoError(t, err)

	app := "jobonce-deploy-" + schema
	deploy := pgtest.PostgresOn(t, schema, 2, "maintenance_work_mem", "1MB", "application_name", app)
	started := time.Now()
	// The concurrent build waits out every transaction older than it in the
	// database, other tests' among them: a bound they all end within.
	errc := migrating(t, deploy, pgstore.Config{MigrateLockTimeout: 10 * time.Second})
	building := func() bool {
		return count(t, pool, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND query LIKE '%CREATE INDEX%' AND state = 'active'`, app) > 0
	}
	waitUntil(t, 10*time.Second, "the index build starts", func() bool { return building() || len(errc) > 0 })

	// Claims of a free key, meanwhile, answer within their lock wait.
	g, err := core.New(s, &core.Config{StoreTimeout: storeTimeout, FailOpen: true})
	require.NoError(t, err)
	var running, most atomic.Int32
	outs, errs, took := make([]core.Outcome, 2), make([]error, 2), make([]time.Duration, 2)
	var wg sync.WaitGroup
	for i := range outs {
		wg.Go(func() {
			claimed := time.Now()
			outs[i], errs[i] = g.Do(ctx, "free-key", func(context.Context) error {
				n := running.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				running.Add(-1)
				return nil
			})
			took[i] = time.Since(claimed)
		})
	}
	wg.Wait()
	stillBuilding := building()

	migErr := <-errc
	t.Logf("migration took %s (err %v); claims answered after %s and %s: %v %v / %v %v",
		time.Since(started), migErr, took[0], took[1], outs[0], errs[0], outs[1], errs[1])
	require.True(t, stillBuilding, "the index was built before the claims answered: fill in more rows")
	require.NoError(t, migErr)
	require.LessOrEqual(t, most.Load(), int32(1), "two copies of one key ran at once")
	for i := range outs {
		// A claim that waited behind the build (which outlasts both) would
		// have run out of its StoreTimeout: unavailable. How long each took
		// is logged above, not asserted: a loaded machine delays a claim
		// without its waiting behind anything.
		require.NotErrorIs(t, errs[i], core.ErrStoreUnavailable, "a free key answered unavailable behind a migration: a claim waited behind the index build")
	}
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
		WHERE i.relname = 'jobonce_keys_expires_at_idx' AND i.relnamespace = $1::regnamespace AND x.indisvalid`, schema))
}

func TestMigrationRebuildsAnIndexAnEarlierConcurrentBuildLeftInvalid(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	pool, schema := pgtest.Postgres(t)
	migratedStore(t, pool, nil)
	_, err := pool.Exec(ctx, `INSERT INTO jobonce_keys (key, expires_at) VALUES ('a', '2030-01-01'), ('b', '2030-01-01')`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "DROP INDEX jobonce_keys_expires_at_idx")
	require.NoError(t, err)
	// A concurrent build that fails (here on a duplicate) leaves its index INVALID.
	_, err = pool.Exec(ctx, "CREATE UNIQUE INDEX CONCURRENTLY jobonce_keys_expires_at_idx ON jobonce_keys (expires_at)")
	require.ErrorContains(t, err, "SQLSTATE 23505")
	index := func() (valid bool, def string) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT x.indisvalid, pg_get_indexdef(x.indexrelid) FROM pg_index x
			JOIN pg_class i ON i.oid = x.indexrelid
			WHERE i.relname = 'jobonce_keys_expires_at_idx' AND i.relnamespace = $1::regnamespace`, schema).Scan(&valid, &def))
		return valid, def
	}
	valid, _ := index()
	require.False(t, valid)

	// The build waits out other tests' transactions too (see above).
	require.NoError(t, pgstore.Migrate(ctx, pool, &pgstore.Config{MigrateLockTimeout: 10 * time.Second}))
	valid, def := index()
	require.True(t, valid, "the invalid index is still there")
	require.NotContains(t, def, "UNIQUE")
	require.Contains(t, def, "(expires_at)")
}
