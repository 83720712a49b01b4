package pgstore_test

import (
	"context"
	"crypto/rand"
	"math"
	"sync"
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

// RecordTx answers a fresh key from one statement that only inserts, and
// goes round again with the statement that takes an expired row over; its
// lock_timeout is set inside the first statement and restored by the state
// read. These tests hold every answer to the same rules in each query exec
// mode: the caller's lock_timeout comes back, the transaction stays usable,
// and fences follow the rows they replace.

// execModePools returns, for each query exec mode, a pool on one migrated
// schema.
func execModePools(t *testing.T) map[string]*pgxpool.Pool {
	t.Helper()
	pool, schema := pgtest.Postgres(t)
	migratedStore(t, pool, nil)
	pools := map[string]*pgxpool.Pool{}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		cfg, err := pgxpool.ParseConfig(pgtest.DatabaseURL())
		require.NoError(t, err)
		cfg.ConnConfig.RuntimeParams["search_path"] = schema
		cfg.ConnConfig.DefaultQueryExecMode = mode
		cfg.MaxConns = 4
		p, err := pgxpool.NewWithConfig(context.Background(), cfg)
		require.NoError(t, err)
		t.Cleanup(p.Close)
		pools[mode.String()] = p
	}
	return pools
}

// expire gives key a row that expired a second ago, with the given fence.
func expire(t *testing.T, pool *pgxpool.Pool, m txMode, key string, fence int64) {
	t.Helper()
	stored, err := m.StoredKey(key)
	require.NoError(t, err)
	_, err = pool.Exec(context.Background(),
		`INSERT INTO jobonce_keys (key, token, fingerprint, expires_at, fence)
		 VALUES ($1, gen_random_uuid(), '', clock_timestamp() - interval '1 second', $2)`, []byte(stored), fence)
	require.NoError(t, err)
}

// showLockTimeout returns lock_timeout as the transaction sees it, which
// also shows that tx is usable.
func showLockTimeout(t *testing.T, tx pgx.Tx) string {
	t.Helper()
	var lt string
	require.NoError(t, tx.QueryRow(context.Background(), "SHOW lock_timeout").Scan(&lt))
	return lt
}

func TestRecordTxEveryAnswerRestoresTheCallersLockTimeout(t *testing.T) {
	t.Parallel()
	pools := execModePools(t)
	for name, pool := range pools {
		t.Run(name, func(t *testing.T) {
			ctx := ctxT(t)
			s := migratedStore(t, pool, &pgstore.Config{LockTimeout: 200 * time.Millisecond, RetryAfter: 3 * time.Second})
			m := txOf(t, s)
			key := func(k string) string { return name + "/" + k }

			// A committed record, a live leased claim, an expired row with a
			// fence ahead of the clock, and a record another transaction holds.
			out, err := m.Do(ctx, key("done"), func(context.Context, pgx.Tx) error { return nil })
			require.NoError(t, err)
			require.Equal(t, core.Ran, out)
			claimed, err := m.StoredKey(key("claimed"))
			require.NoError(t, err)
			r, err := s.Claim(ctx, driver.ClaimRequest{Key: claimed, Token: driver.NewToken(), Lease: time.Minute})
			require.NoError(t, err)
			require.Equal(t, driver.StateClaimed, r.State)
			const ahead = int64(1) << 60 // microseconds, far past the clock
			expire(t, pool, m, key("expired"), ahead)
			holder, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer holder.Rollback(ctx)
			require.Equal(t, driver.StateClaimed, m.Record(t, ctx, holder, key("held")).State)

			record := func(k string) (driver.ClaimReply, time.Duration, error) {
				t.Helper()
				tx, err := pool.Begin(ctx)
				require.NoError(t, err)
				defer tx.Rollback(ctx)
				_, err = tx.Exec(ctx, "SET LOCAL lock_timeout = '3s'")
				require.NoError(t, err)
				var stored string
				if k == "" { // a key longer than the index holds, and incompressible
					for len(stored) < 4000 {
						stored += rand.Text()
					}
				} else {
					stored, err = m.StoredKey(key(k))
					require.NoError(t, err)
				}
				began := time.Now()
				reply, err := s.RecordTx(ctx, tx, driver.RecordRequest{Key: stored, Retention: time.Hour})
				took := time.Since(began)
				require.Equal(t, "3s", showLockTimeout(t, tx), "%s: the caller's lock_timeout is restored and tx is usable", k)
				return reply, took, err
			}

			reply, _, err := record("fresh")
			require.NoError(t, err)
			require.Equal(t, driver.StateClaimed, reply.State)
			require.InDelta(t, float64(time.Now().UnixMicro()), float64(reply.Fence), float64(time.Minute/time.Microsecond), "a fresh key's fence is the clock")

			reply, _, err = record("done")
			require.NoError(t, err)
			require.Equal(t, driver.StateDone, reply.State)
			require.Greater(t, reply.Remaining, 59*time.Minute)

			reply, _, err = record("claimed")
			require.NoError(t, err)
			require.Equal(t, driver.StateRunning, reply.State)
			require.Greater(t, reply.Remaining, 50*time.Second, "the claim's remaining lease")

			reply, _, err = record("expired")
			require.NoError(t, err)
			require.Equal(t, driver.StateClaimed, reply.State, "an expired row is taken over")
			require.Equal(t, ahead+1, reply.Fence, "one more than the fence of the row it replaces")

			reply, took, err := record("held")
			require.NoError(t, err)
			require.Equal(t, driver.StateRunning, reply.State)
			require.Equal(t, 3*time.Second, reply.Remaining, "Config.RetryAfter")
			require.GreaterOrEqual(t, took, 200*time.Millisecond)
			require.Less(t, took, 2*time.Second, "bounded by LockTimeout, not the caller's 3s")

			_, _, err = record("")
			require.ErrorContains(t, err, "key is too long")
		})
	}
}

// TestRecordTxTwiceInOneTransaction: each record restores the lock_timeout
// the transaction has at the time, also after the caller changed it in
// between, and a key recorded earlier in the transaction is done.
func TestRecordTxTwiceInOneTransaction(t *testing.T) {
	t.Parallel()
	pools := execModePools(t)
	for name, pool := range pools {
		t.Run(name, func(t *testing.T) {
			ctx := ctxT(t)
			m := txOf(t, migratedStore(t, pool, nil))
			expire(t, pool, m, name+"/expired", 7)
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(ctx)
			require.Equal(t, "0", showLockTimeout(t, tx))
			for i, step := range []struct {
				key, lockTimeout string
				want             driver.State
			}{
				{"a", "", driver.StateClaimed},
				{"a", "5s", driver.StateDone},
				{"expired", "6s", driver.StateClaimed},
				{"expired", "", driver.StateDone},
				{"b", "7s", driver.StateClaimed},
			} {
				want := showLockTimeout(t, tx)
				if step.lockTimeout != "" {
					_, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+step.lockTimeout+"'")
					require.NoError(t, err)
					want = step.lockTimeout
				}
				require.Equal(t, step.want, m.Record(t, ctx, tx, name+"/"+step.key).State, "step %d", i)
				require.Equal(t, want, showLockTimeout(t, tx), "step %d", i)
			}
			require.NoError(t, tx.Commit(ctx))
		})
	}
}

// TestRecordTxWaitsForATakeover: a key whose expired row another
// transaction is taking over waits for that transaction (at most
// LockTimeout): Done when it commits, taken over in turn when it rolls back
// (with a fence one more than the expired row's), Running when it outlasts
// the wait.
func TestRecordTxWaitsForATakeover(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	pool, _ := pgtest.Postgres(t)
	const ahead = int64(1) << 60
	for _, end := range []string{"commit", "rollback", "outlast"} {
		t.Run(end, func(t *testing.T) {
			lockTimeout := 10 * time.Second
			if end == "outlast" {
				lockTimeout = 150 * time.Millisecond
			}
			s := migratedStore(t, pool, &pgstore.Config{LockTimeout: lockTimeout, RetryAfter: 2 * time.Second})
			m := txOf(t, s)
			expire(t, pool, m, end, ahead)
			first, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer first.Rollback(ctx)
			reply := m.Record(t, ctx, first, end)
			require.Equal(t, driver.StateClaimed, reply.State)
			require.Equal(t, ahead+1, reply.Fence)

			second, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer second.Rollback(ctx)
			var wg sync.WaitGroup
			if end != "outlast" {
				wg.Go(func() {
					time.Sleep(200 * time.Millisecond)
					if end == "commit" {
						require.NoError(t, first.Commit(ctx))
					} else {
						require.NoError(t, first.Rollback(ctx))
					}
				})
			}
			began := time.Now()
			reply = m.Record(t, ctx, second, end)
			waited := time.Since(began)
			wg.Wait()
			require.GreaterOrEqual(t, waited, 140*time.Millisecond, "it waited for the first transaction")
			require.Equal(t, "0", showLockTimeout(t, second))
			switch end {
			case "commit":
				require.Equal(t, driver.StateDone, reply.State)
			case "rollback":
				require.Equal(t, driver.StateClaimed, reply.State)
				require.Equal(t, ahead+1, reply.Fence, "the rolled-back takeover left the expired row's fence")
			case "outlast":
				require.Equal(t, driver.StateRunning, reply.State)
				require.Equal(t, 2*time.Second, reply.Remaining)
				require.Less(t, waited, 5*time.Second)
			}
		})
	}
}

// TestDoTxLostCommitAnswerAfterATakeover is TestDoTxLostCommitAnswer for a
// key whose expired row the record took over (the statement of a second
// attempt), whose transaction id must come back with the record too. The
// proxy stays down until the commit has finished, so the cancel request
// pgx sends when its connection breaks cannot stop the commit: it goes
// through, only its answer is lost, and CommitTx must find it committed.
func TestDoTxLostCommitAnswerAfterATakeover(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	direct, schema := pgtest.Postgres(t)
	m := txOf(t, migratedStore(t, direct, nil))
	effects(t, direct)
	_, err := direct.Exec(ctx, `
CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.5); RETURN NULL; END $$;
CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON effects DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit();`)
	require.NoError(t, err)
	expire(t, direct, m, "k", math.MaxInt64/2)

	flaky := testenv.StartFlaky(t, "127.0.0.1:5432")
	cfg, err := pgxpool.ParseConfig("postgres://postgres@" + flaky.Addr() + "/test?sslmode=disable")
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	viaProxy, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(viaProxy.Close)
	mode := txOf(t, migratedStore(t, viaProxy, nil))

	var fence int64
	out, err := mode.Do(ctx, "k", func(ctx context.Context, tx pgx.Tx) error {
		fence, _ = core.Fence(ctx)
		time.AfterFunc(200*time.Millisecond, func() { flaky.Cut(); time.AfterFunc(time.Second, flaky.Restore) })
		return insertEffect("k")(ctx, tx)
	})
	require.Equal(t, int64(math.MaxInt64/2)+1, fence, "the expired row was taken over")
	require.NoError(t, err, "the commit went through; only its answer was lost")
	require.Equal(t, core.Ran, out)
	require.Equal(t, 1, count(t, direct, "SELECT count(*) FROM effects"))
	again, err := mode.Do(ctx, "k", insertEffect("k"))
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, again)
}
