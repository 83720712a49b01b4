package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
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

// effects creates a table of effects without a unique constraint, so a
// duplicate effect shows as a second row.
func effects(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(context.Background(), "CREATE TABLE effects (key text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())")
	require.NoError(t, err)
}

func insertEffect(key string) func(ctx context.Context, tx pgx.Tx) error {
	return func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO effects (key) VALUES ($1)", key)
		return err
	}
}

func records(t testing.TB, pool *pgxpool.Pool) int {
	t.Helper()
	return count(t, pool, "SELECT count(*) FROM jobonce_keys")
}

func TestDoTxRunsOnceThenDuplicate(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, pool := newStore(t, nil)
	effects(t, pool)

	out, err := txOf(t, s).Do(ctx, "order-1", insertEffect("order-1"))
	require.NoError(t, err)
	require.Equal(t, core.Ran, out)

	out, err = txOf(t, s).Do(ctx, "order-1", insertEffect("order-1"))
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, out)

	// The store records several keys in one transaction.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	states := map[string]driver.State{}
	for _, key := range []string{"order-1", "order-2", "order-3", "order-2"} {
		states[key] = txOf(t, s).Record(t, ctx, tx, key).State // the last state per key
	}
	require.Equal(t, map[string]driver.State{"order-1": driver.StateDone, "order-2": driver.StateDone, "order-3": driver.StateClaimed}, states,
		"a key recorded earlier in the same transaction is done")
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, 1, count(t, pool, "SELECT count(*) FROM effects"))
	var stored [][]byte
	for _, key := range []string{"order-1", "order-2", "order-3"} {
		k, err := txOf(t, s).StoredKey(key)
		require.NoError(t, err)
		stored = append(stored, []byte(k))
	}
	require.Equal(t, 3, count(t, pool, "SELECT count(*) FROM jobonce_keys WHERE key = ANY($1) AND token IS NULL", stored))
}

func TestDoTxRollbackLeavesNoRecord(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, pool := newStore(t, nil)
	effects(t, pool)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, insertEffect("k")(ctx, tx))
	require.Equal(t, driver.StateClaimed, txOf(t, s).Record(t, ctx, tx, "k").State)
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, 0, records(t, pool))
	require.Equal(t, 0, count(t, pool, "SELECT count(*) FROM effects"))

	// fn's error comes back unchanged; Do rolls back.
	boom := errors.New("boom")
	out, err := txOf(t, s).Do(ctx, "k", func(ctx context.Context, tx pgx.Tx) error {
		require.NoError(t, insertEffect("k")(ctx, tx))
		return boom
	})
	require.Same(t, boom, err)
	require.Equal(t, core.Failed, out)
	require.Equal(t, 0, records(t, pool))

	// A panic propagates and leaves nothing either.
	require.PanicsWithValue(t, "kaboom", func() {
		_, _ = txOf(t, s).Do(ctx, "k", func(ctx context.Context, tx pgx.Tx) error {
			require.NoError(t, insertEffect("k")(ctx, tx))
			panic("kaboom")
		})
	})
	require.Equal(t, 0, records(t, pool))
	require.Equal(t, 0, count(t, pool, "SELECT count(*) FROM effects"))

	out, err = txOf(t, s).Do(ctx, "k", insertEffect("k"))
	require.NoError(t, err)
	require.Equal(t, core.Ran, out)
	require.Equal(t, 1, count(t, pool, "SELECT count(*) FROM effects"))
}

// TestDoTxUncommittedCopyGetsRunning: a copy that meets an uncommitted
// record waits at most LockTimeout and gets ErrRunning; the store leaves the
// waiting transaction usable with its own lock_timeout; after the commit the
// copy is a duplicate.
func TestDoTxUncommittedCopyGetsRunning(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, pool := newStore(t, &pgstore.Config{LockTimeout: 50 * time.Millisecond, RetryAfter: 3 * time.Second})
	effects(t, pool)
	mode := txOf(t, s)

	first, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer first.Rollback(ctx)
	require.NoError(t, insertEffect("k")(ctx, first))
	require.Equal(t, driver.StateClaimed, mode.Record(t, ctx, first, "k").State)

	// The store, in a transaction with its own lock_timeout.
	second, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer second.Rollback(ctx)
	_, err = second.Exec(ctx, "SET LOCAL lock_timeout = '7s'")
	require.NoError(t, err)
	began := time.Now()
	reply := mode.Record(t, ctx, second, "k")
	waited := time.Since(began)
	require.Equal(t, driver.StateRunning, reply.State)
	require.Equal(t, 3*time.Second, reply.Remaining, "Config.RetryAfter")
	require.GreaterOrEqual(t, waited, 50*time.Millisecond)
	require.Less(t, waited, 5*time.Second, "the wait is bounded by LockTimeout, not the caller's 7s")
	var lt string
	require.NoError(t, second.QueryRow(ctx, "SHOW lock_timeout").Scan(&lt))
	require.Equal(t, "7s", lt, "the caller's lock_timeout is restored")

	// The transactional mode and a leased claim do not hang behind it.
	ran := false
	out, err := mode.Do(ctx, "k", func(context.Context, pgx.Tx) error { ran = true; return nil })
	require.ErrorIs(t, err, core.ErrRunning)
	require.Equal(t, core.Running, out)
	after, ok := core.RetryAfter(err)
	require.True(t, ok)
	require.Equal(t, 3*time.Second, after)
	g, err := core.New(s, nil)
	require.NoError(t, err)
	out, err = g.Do(ctx, "k", func(context.Context) error { ran = true; return nil })
	require.ErrorIs(t, err, core.ErrRunning)
	require.Equal(t, core.Running, out)

	require.NoError(t, first.Commit(ctx))
	require.Equal(t, driver.StateDone, mode.Record(t, ctx, second, "k").State)
	require.NoError(t, second.Commit(ctx))
	out, err = mode.Do(ctx, "k", func(context.Context, pgx.Tx) error { ran = true; return nil })
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, out)
	out, err = g.Do(ctx, "k", func(context.Context) error { ran = true; return nil })
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, out)
	require.False(t, ran)
	require.Equal(t, 1, count(t, pool, "SELECT count(*) FROM effects"))
}

// TestDoTxWaitsForRollback: a copy blocked on an uncommitted record runs
// itself when that transaction rolls back within the lock timeout.
func TestDoTxWaitsForRollback(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, pool := newStore(t, &pgstore.Config{LockTimeout: 10 * time.Second})
	effects(t, pool)

	recorded := make(chan struct{})
	rollback := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		out, err := txOf(t, s).Do(ctx, "k", func(ctx context.Context, tx pgx.Tx) error {
			close(recorded)
			<-rollback
			return errors.New("rolled back")
		})
		require.Error(t, err)
		require.Equal(t, core.Failed, out)
	})
	<-recorded
	time.AfterFunc(200*time.Millisecond, func() { close(rollback) })
	out, err := txOf(t, s).Do(ctx, "k", insertEffect("k"))
	require.NoError(t, err)
	require.Equal(t, core.Ran, out)
	wg.Wait()
	require.Equal(t, 1, count(t, pool, "SELECT count(*) FROM effects"))
}

func TestDoTxRestoresDefaultLockTimeout(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, pool := newStore(t, nil)
	var before, inside string
	require.NoError(t, pool.QueryRow(ctx, "SHOW lock_timeout").Scan(&before))
	_, err := txOf(t, s).Do(ctx, "k", func(ctx context.Context, tx pgx.Tx) error {
		return tx.QueryRow(ctx, "SHOW lock_timeout").Scan(&inside)
	})
	require.NoError(t, err)
	require.Equal(t, before, inside, "fn runs under the connection's own lock_timeout")

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	txOf(t, s).Record(t, ctx, tx, "k2")
	var after string
	require.NoError(t, tx.QueryRow(ctx, "SHOW lock_timeout").Scan(&after))
	require.Equal(t, before, after, "RecordTx restores it")
}

// TestDoTxAndLeasedClaimsShareKeys: the transactional mode and leased claims
// see each other's rows.
func TestDoTxAndLeasedClaimsShareKeys(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, pool := newStore(t, nil)
	effects(t, pool)
	g, err := core.New(s, nil)
	require.NoError(t, err)

	// A live leased claim: the transactional copy is told to come back later.
	keyA, err := g.StoredKey("a")
	require.NoError(t, err)
	stored, err := txOf(t, s).StoredKey("a")
	require.NoError(t, err)
	require.Equal(t, keyA, stored)
	held := driver.ClaimRequest{Key: keyA, Token: driver.NewToken(), Lease: time.Minute}
	r, err := s.Claim(ctx, held)
	require.NoError(t, err)
	require.Equal(t, driver.StateClaimed, r.State)
	out, err := txOf(t, s).Do(ctx, "a", insertEffect("a"))
	require.ErrorIs(t, err, core.ErrRunning)
	require.Equal(t, core.Running, out)
	after, _ := core.RetryAfter(err)
	require.Equal(t, 10*time.Second, after, "the held claim's remaining minute, bounded by the Guard's MaxRetryAfter (Lease/3)")

	require.NoError(t, s.Complete(ctx, driver.CompleteRequest{Key: keyA, Token: held.Token, Retention: time.Hour}))
	out, err = txOf(t, s).Do(ctx, "a", insertEffect("a"))
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, out)

	// An expired leased claim is free for the transactional copy.
	keyB, err := g.StoredKey("b")
	require.NoError(t, err)
	_, err = s.Claim(ctx, driver.ClaimRequest{Key: keyB, Token: driver.NewToken(), Lease: 20 * time.Millisecond})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		out, err := txOf(t, s).Do(ctx, "b", insertEffect("b"))
		return err == nil && out == core.Ran
	}, 5*time.Second, 10*time.Millisecond)
	out, err = g.Do(ctx, "b", func(context.Context) error { return errors.New("must not run") })
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, out)
	require.Equal(t, 1, count(t, pool, "SELECT count(*) FROM effects WHERE key = 'b'"))
}

func TestDoTxRetention(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, pool := newStore(t, nil)
	effects(t, pool)
	out, err := txWith(t, s, &core.Config{Lease: 3 * time.Millisecond, Retention: 100 * time.Millisecond}).Do(ctx, "k", insertEffect("k"))
	require.NoError(t, err)
	require.Equal(t, core.Ran, out)
	var leftMs float64
	require.NoError(t, pool.QueryRow(ctx, "SELECT extract(epoch FROM expires_at - clock_timestamp()) * 1000 FROM jobonce_keys").Scan(&leftMs))
	require.LessOrEqual(t, leftMs, 100.0)
	require.Eventually(t, func() bool {
		out, err := txOf(t, s).Do(ctx, "k", insertEffect("k"))
		return err == nil && out == core.Ran
	}, 5*time.Second, 20*time.Millisecond)
	require.Equal(t, 2, count(t, pool, "SELECT count(*) FROM effects"))
}

func TestDoTxJobConflict(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, _ := newStore(t, nil)
	job := core.Job{Key: "k", Fingerprint: core.Fingerprint([]byte("payload-1"))}
	mode := txOf(t, s)
	run := func(job core.Job) (core.Outcome, error) {
		return mode.Run(ctx, job, func(context.Context, pgx.Tx) error { return nil })
	}
	out, err := run(job)
	require.NoError(t, err)
	require.Equal(t, core.Ran, out)
	out, err = run(core.Job{Key: "k", Fingerprint: core.Fingerprint([]byte("payload-2"))})
	require.ErrorIs(t, err, core.ErrConflict)
	require.Equal(t, core.Conflict, out)
	out, err = run(job)
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, out)
	out, err = run(core.Job{Key: "k"})
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, out, "no fingerprint, no check")

	// A live leased claim with another fingerprint is a conflict too.
	held, err := txOf(t, s).StoredKey("held")
	require.NoError(t, err)
	_, err = s.Claim(ctx, driver.ClaimRequest{Key: held, Token: driver.NewToken(), Fingerprint: "fp-a", Lease: time.Minute})
	require.NoError(t, err)
	out, err = run(core.Job{Key: "held", Fingerprint: "fp-b"})
	require.ErrorIs(t, err, core.ErrConflict)
	require.ErrorContains(t, err, "is running with fingerprint")
	require.Equal(t, core.Conflict, out)
	out, err = run(core.Job{Key: "held", Fingerprint: "fp-a"})
	require.ErrorIs(t, err, core.ErrRunning)
	require.Equal(t, core.Running, out)
}

func TestDoTxBadInput(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, pool := newStore(t, nil)
	nop := func(context.Context, pgx.Tx) error { return nil }
	mode := txOf(t, s)

	out, err := mode.Do(ctx, "k", nil)
	require.ErrorContains(t, err, "function is nil")
	require.Equal(t, core.Rejected, out)
	out, err = mode.Do(ctx, "", nop)
	require.ErrorIs(t, err, core.ErrInvalidKey)
	require.Equal(t, core.Rejected, out)
	_, err = s.RecordTx(ctx, nil, driver.RecordRequest{Key: "k", Retention: time.Hour})
	require.ErrorContains(t, err, "tx is nil")

	// Long and binary keys are fine; a long key is stored hashed.
	long := strings.Repeat("x", 10_000)
	out, err = mode.Do(ctx, long, nop)
	require.NoError(t, err)
	require.Equal(t, core.Ran, out)
	out, err = mode.Do(ctx, "\x00\xff", nop)
	require.NoError(t, err)
	require.Equal(t, core.Ran, out)
	var maxLen int
	require.NoError(t, pool.QueryRow(ctx, "SELECT max(length(key)) FROM jobonce_keys").Scan(&maxLen))
	require.LessOrEqual(t, maxLen, len("jobonce:")+core.MaxKeyLen)
}

// TestDoTxConcurrentCopiesExactlyOnce: 32 workers run 4 copies of each of
// 500 jobs, retrying copies told the job is running, and write the effects
// into a table without a unique constraint: every job's effect exists once.
func TestDoTxConcurrentCopiesExactlyOnce(t *testing.T) {
	t.Parallel()
	testenv.Short(t)
	ctx := ctxT(t)
	small, schema := pgtest.Postgres(t)
	migratedStore(t, small, &pgstore.Config{})
	effects(t, small)
	pool := pgtest.PostgresOn(t, schema, 34)
	s := migratedStore(t, pool, &pgstore.Config{LockTimeout: 20 * time.Millisecond, RetryAfter: time.Millisecond})

	mode := txOf(t, s)
	const jobs, copies, workers = 500, 4, 32
	queue := make(chan string, jobs*copies)
	deliveries := make([]string, 0, jobs*copies)
	for j := range jobs {
		for range copies {
			deliveries = append(deliveries, fmt.Sprintf("job-%03d", j))
		}
	}
	rand.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })
	for _, d := range deliveries {
		queue <- d
	}
	var pending atomic.Int32
	pending.Store(int32(len(deliveries)))
	var ran, dup, running atomic.Int32
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for key := range queue {
				effect := func(ctx context.Context, tx pgx.Tx) error {
					if key[len(key)-1] == '7' { // some jobs hold their transaction longer
						if _, err := tx.Exec(ctx, "SELECT pg_sleep(0.03)"); err != nil {
							return err
						}
					}
					return insertEffect(key)(ctx, tx)
				}
				job := core.Job{Key: key}
				if w%2 == 0 {
					job.Fingerprint = key // half the workers check fingerprints
				}
				out, err := mode.Run(ctx, job, effect)
				switch {
				case errors.Is(err, core.ErrRunning):
					running.Add(1)
					queue <- key // a retry, as a queue would redeliver it
					continue
				case err != nil:
					t.Errorf("%s: %v (%s)", key, err, out)
				case out == core.Ran:
					ran.Add(1)
				case out == core.Duplicate:
					dup.Add(1)
				default:
					t.Errorf("%s: outcome %s", key, out)
				}
				if pending.Add(-1) == 0 {
					close(queue)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("ran %d, duplicates %d, running retries %d", ran.Load(), dup.Load(), running.Load())
	require.Equal(t, int32(jobs), ran.Load())
	require.Equal(t, int32(jobs*(copies-1)), dup.Load())
	require.Equal(t, jobs, count(t, pool, "SELECT count(*) FROM effects"))
	require.Equal(t, jobs, count(t, pool, "SELECT count(DISTINCT key) FROM effects"))
	require.Equal(t, jobs, records(t, pool))
}

// TestDoTxTerminatedBackend kills a worker's connection in the middle of its
// transaction: the commit fails (Failed, with the commit's error), nothing is
// recorded, and a later copy runs the job once.
func TestDoTxTerminatedBackend(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, pool := newStore(t, nil)
	effects(t, pool)
	mode := txOf(t, s)

	out, err := mode.Do(ctx, "k", func(ctx context.Context, tx pgx.Tx) error {
		if err := insertEffect("k")(ctx, tx); err != nil {
			return err
		}
		// A concurrent copy is told the job is running...
		out, err := mode.Do(ctx, "k", insertEffect("k"))
		require.ErrorIs(t, err, core.ErrRunning)
		require.Equal(t, core.Running, out)
		// ...then the worker's connection dies before it commits.
		var pid int
		require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
		var killed bool
		require.NoError(t, pool.QueryRow(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&killed))
		require.True(t, killed)
		return nil
	})
	require.ErrorContains(t, err, "commit")
	require.Equal(t, core.Failed, out, "the commit failed: nothing happened")
	require.Equal(t, 0, records(t, pool))
	require.Equal(t, 0, count(t, pool, "SELECT count(*) FROM effects"))

	out, err = mode.Do(ctx, "k", insertEffect("k"))
	require.NoError(t, err)
	require.Equal(t, core.Ran, out)
	out, err = mode.Do(ctx, "k", insertEffect("k"))
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, out)
	require.Equal(t, 1, count(t, pool, "SELECT count(*) FROM effects"))
}

// TestDoTxPlainKeys: with PlainKeys, the transactional mode and leased claims still
// share rows, and the stored key is readable.
func TestDoTxPlainKeys(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, pool := newStore(t, nil)
	g, err := core.New(s, &core.Config{KeyPrefix: "app:", PlainKeys: true})
	require.NoError(t, err)
	out, err := txWith(t, s, &core.Config{KeyPrefix: "app:", PlainKeys: true}).Do(ctx, "invoice-1", func(context.Context, pgx.Tx) error { return nil })
	require.NoError(t, err)
	require.Equal(t, core.Ran, out)
	require.Equal(t, 1, count(t, pool, "SELECT count(*) FROM jobonce_keys WHERE key = $1", []byte("app:invoice-1")))
	out, err = g.Do(ctx, "invoice-1", func(context.Context) error { return errors.New("must not run") })
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, out)
}

// TestDoTxCancelledWhileWaiting: a copy waiting on an uncommitted record
// returns promptly when its context is cancelled, without running.
func TestDoTxCancelledWhileWaiting(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, pool := newStore(t, &pgstore.Config{LockTimeout: 30 * time.Second})
	first, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer first.Rollback(ctx)
	txOf(t, s).Record(t, ctx, first, "k")

	wctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(200*time.Millisecond, cancel)
	began := time.Now()
	out, err := txOf(t, s).Do(wctx, "k", func(context.Context, pgx.Tx) error { return errors.New("must not run") })
	require.NotErrorIs(t, err, core.ErrStoreUnavailable, "the caller's own deadline is not an outage")
	require.ErrorIs(t, err, context.Canceled, "the error says the caller's context ended")
	require.Equal(t, core.Canceled, out)
	require.Less(t, time.Since(began), 10*time.Second)

	require.NoError(t, first.Commit(ctx))
	out, err = txOf(t, s).Do(ctx, "k", func(context.Context, pgx.Tx) error { return errors.New("must not run") })
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, out)
}

// TestDoTxCommitsAfterTheCallerStops: when the caller's context ends after
// fn succeeded, the work is complete: the TxGuard commits it and reports
// Ran, which a later copy confirms as a Duplicate.
func TestDoTxCommitsAfterTheCallerStops(t *testing.T) {
	t.Parallel()
	s, pool := newStore(t, nil)
	effects(t, pool)
	mode := txOf(t, s)
	ctx, cancel := context.WithCancel(ctxT(t))
	out, err := mode.Do(ctx, "k", func(ctx context.Context, tx pgx.Tx) error {
		err := insertEffect("k")(ctx, tx)
		cancel()
		return err
	})
	require.NoError(t, err)
	require.Equal(t, core.Ran, out)
	out, err = mode.Do(ctxT(t), "k", insertEffect("k"))
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, out)
	require.Equal(t, 1, count(t, pool, "SELECT count(*) FROM effects"))
}

// TestDoTxGoexit: runtime.Goexit in fn rolls back and ends the goroutine as
// it would without jobonce, reported as Failed, rather than a panic.
func TestDoTxGoexit(t *testing.T) {
	t.Parallel()
	s, pool := newStore(t, nil)
	effects(t, pool)
	var outs testenv.Outcomes
	mode := txWith(t, s, &core.Config{Observer: outs.Observe})
	done := make(chan any, 1)
	go func() {
		defer func() { done <- recover() }()
		_, _ = mode.Do(ctxT(t), "k", func(ctx context.Context, tx pgx.Tx) error {
			if err := insertEffect("k")(ctx, tx); err != nil {
				return err
			}
			runtime.Goexit()
			return nil
		})
	}()
	require.Nil(t, <-done, "Goexit became a panic")
	require.EqualValues(t, 1, outs.Get(core.Failed))
	require.Equal(t, 0, records(t, pool))
	require.Equal(t, 0, count(t, pool, "SELECT count(*) FROM effects"))
}

// TestDoTxLostCommitAnswer: when the connection is cut while COMMIT runs
// on the server, the TxGuard reports what happened: Ran if the commit went
// through (only its answer was lost: it asks the store again and finds the
// key done), Failed if it did not; a redelivery agrees either way.
func TestDoTxLostCommitAnswer(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	direct, schema := pgtest.Postgres(t)
	migratedStore(t, direct, nil)
	effects(t, direct)
	// COMMIT runs a deferred trigger for 500ms: the cut lands inside it.
	_, err := direct.Exec(ctx, `
CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.5); RETURN NULL; END $$;
CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON effects DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit();`)
	require.NoError(t, err)

	flaky := testenv.StartFlaky(t, "127.0.0.1:5432")
	cfg, err := pgxpool.ParseConfig("postgres://postgres@" + flaky.Addr() + "/test?sslmode=disable")
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	viaProxy, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(viaProxy.Close)
	mode := txOf(t, migratedStore(t, viaProxy, nil))

	out, err := mode.Do(ctx, "k", func(ctx context.Context, tx pgx.Tx) error {
		time.AfterFunc(200*time.Millisecond, func() { flaky.Cut(); flaky.Restore() })
		return insertEffect("k")(ctx, tx)
	})
	effects := 0
	require.Eventually(t, func() bool { // the server has finished with the transaction
		effects = count(t, direct, "SELECT count(*) FROM effects")
		return count(t, direct, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'commit%' AND state = 'active'") == 0
	}, 10*time.Second, 20*time.Millisecond)
	t.Logf("reported %s (%v); effects committed: %d", out, err, effects)
	again, err2 := mode.Do(ctx, "k", insertEffect("k"))
	require.NoError(t, err2)
	if effects == 1 {
		require.NoError(t, err)
		require.Equal(t, core.Ran, out, "the commit went through; only its answer was lost")
		require.Equal(t, core.Duplicate, again)
	} else {
		require.Equal(t, core.Failed, out, "the commit did not go through")
		require.ErrorContains(t, err, "commit")
		require.Equal(t, core.Ran, again)
	}
}

// TestDoTxHeldKeyUnderAShortStoreTimeout: with LockTimeout longer than the
// Guard's StoreTimeout, a key held by an open transaction is still answered
// as Running (the lock wait is shortened to fit the call's deadline), never
// as a store outage.
func TestDoTxHeldKeyUnderAShortStoreTimeout(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	// StoreTimeout well under LockTimeout, with a quarter of it (500 ms), the
	// store's margin for its round trips, over a loaded machine's pauses.
	s, pool := newStore(t, &pgstore.Config{LockTimeout: 8 * time.Second})
	mode := txWith(t, s, &core.Config{StoreTimeout: 2 * time.Second})
	holder, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer holder.Rollback(ctx)
	mode.Record(t, ctx, holder, "k")
	out, err := mode.Do(ctx, "k", func(context.Context, pgx.Tx) error { return errors.New("must not run") })
	require.ErrorIs(t, err, core.ErrRunning)
	require.Equal(t, core.Running, out)
	g := testenv.NewGuard(t, s, &core.Config{StoreTimeout: 2 * time.Second})
	out, err = g.Do(ctx, "k", func(context.Context) error { return errors.New("must not run") })
	require.ErrorIs(t, err, core.ErrRunning, "a leased claim too")
	require.Equal(t, core.Running, out)
}

// proxied returns a pool on schema whose connections pass through a fault
// proxy, and the proxy.
func proxied(t testing.TB, schema string) (*pgxpool.Pool, *testenv.Proxy) {
	t.Helper()
	proxy := testenv.StartProxy(t, "127.0.0.1:0", "127.0.0.1:5432")
	cfg, err := pgxpool.ParseConfig("postgres://postgres@" + proxy.Addr() + "/test?sslmode=disable")
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	t.Cleanup(proxy.Cut) // first: a silenced connection's close waits for the server's side
	return pool, proxy
}

// TestCommitLostInAPartitionEndsItsOrphanedTransaction: when the network
// partitions while COMMIT is on its way (the server never gets it and its
// side of the connection stays open, idle in transaction, the key's row
// locked), the TxGuard ends the orphaned backend from another connection
// and reports the transaction's fate, Failed: it rolled back. A redelivery
// right after runs the job, where it got Running for as long as TCP
// keepalive took to notice (2h11m by default).
func TestCommitLostInAPartitionEndsItsOrphanedTransaction(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	direct, schema := pgtest.Postgres(t)
	migratedStore(t, direct, nil)
	effects(t, direct)
	pool, proxy := proxied(t, schema)
	storeTimeout := 500 * time.Millisecond
	mode := txWith(t, migratedStore(t, pool, nil), &core.Config{StoreTimeout: storeTimeout})

	start := time.Now()
	out, err := mode.Do(ctx, "k", func(ctx context.Context, tx pgx.Tx) error {
		proxy.LoseRequestOnce([]byte("commit"))
		return insertEffect("k")(ctx, tx)
	})
	reported := time.Since(start)
	require.True(t, proxy.Silenced(), "the COMMIT was lost")
	require.Equal(t, core.Failed, out, "the transaction was rolled back")
	require.ErrorContains(t, err, "commit")
	require.Zero(t, count(t, direct, "SELECT count(*) FROM effects"))
	require.Zero(t, count(t, direct, "SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%' AND query LIKE 'INSERT INTO effects%'"),
		"no backend is left idle in transaction")

	again := txWith(t, migratedStore(t, direct, nil), &core.Config{StoreTimeout: storeTimeout})
	out, err = again.Do(ctx, "k", insertEffect("k"))
	answered := time.Since(start)
	require.NoError(t, err)
	require.Equal(t, core.Ran, out, "a redelivery right after runs the job")
	require.Equal(t, 1, count(t, direct, "SELECT count(*) FROM effects"))
	t.Logf("outcome reported after %s, redelivery answered after %s", reported, answered)
	require.Less(t, answered, storeTimeout+5*time.Second, "answered within the commit's and the read-back's bounds")
}

// TestCommitAnsweredPastItsDeadlineIsRan: a COMMIT that goes through but
// whose answer comes after the commit's deadline (StoreTimeout) is reported
// Ran: the read-back asks, under a bound of its own, whether the
// transaction committed, and a redelivery is a Duplicate.
func TestCommitAnsweredPastItsDeadlineIsRan(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	direct, schema := pgtest.Postgres(t)
	migratedStore(t, direct, nil)
	effects(t, direct)
	pool, proxy := proxied(t, schema)
	mode := txWith(t, migratedStore(t, pool, nil), &core.Config{StoreTimeout: 500 * time.Millisecond})

	out, err := mode.Do(ctx, "k", func(ctx context.Context, tx pgx.Tx) error {
		proxy.HoldReplyOnce([]byte("commit"))
		return insertEffect("k")(ctx, tx)
	})
	require.True(t, proxy.Silenced(), "the COMMIT's answer was held back")
	require.NoError(t, err)
	require.Equal(t, core.Ran, out, "the transaction committed")
	require.Equal(t, 1, count(t, direct, "SELECT count(*) FROM effects"))
	out, err = mode.Do(ctx, "k", insertEffect("k"))
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, out)
	require.Equal(t, 1, count(t, direct, "SELECT count(*) FROM effects"))
}

// TestUnguardedCommitAnsweredPastItsDeadlineIsUnguarded: a job run with
// Job.Unguarded records no key, yet its COMMIT whose answer comes after
// the commit's deadline is read back too: the transaction committed, so
// the outcome is Unguarded, not Failed.
func TestUnguardedCommitAnsweredPastItsDeadlineIsUnguarded(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	direct, schema := pgtest.Postgres(t)
	migratedStore(t, direct, nil)
	effects(t, direct)
	pool, proxy := proxied(t, schema)
	mode := txWith(t, migratedStore(t, pool, nil), &core.Config{StoreTimeout: 500 * time.Millisecond})

	out, err := mode.Run(ctx, core.Job{Key: "k", Unguarded: true}, func(ctx context.Context, tx pgx.Tx) error {
		proxy.HoldReplyOnce([]byte("commit"))
		return insertEffect("k")(ctx, tx)
	})
	require.True(t, proxy.Silenced(), "the COMMIT's answer was held back")
	require.NoError(t, err)
	require.Equal(t, core.Unguarded, out, "the transaction committed")
	require.Equal(t, 1, count(t, direct, "SELECT count(*) FROM effects"))
	require.Zero(t, records(t, direct), "an unguarded job records no key")
}

// TestShadowCopyCommitAnsweredPastItsDeadlineIsNotFailed: in shadow mode a
// copy that finds its key done runs anyway, without a record of its own;
// its COMMIT whose answer comes after the commit's deadline is read back,
// and the copy is reported Unguarded, as it committed.
func TestShadowCopyCommitAnsweredPastItsDeadlineIsNotFailed(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	direct, schema := pgtest.Postgres(t)
	migratedStore(t, direct, nil)
	effects(t, direct)
	pool, proxy := proxied(t, schema)
	mode := txWith(t, migratedStore(t, pool, nil), &core.Config{StoreTimeout: 500 * time.Millisecond, Shadow: true})
	out, err := mode.Do(ctx, "k", insertEffect("k"))
	require.NoError(t, err)
	require.Equal(t, core.Ran, out)

	out, err = mode.Do(ctx, "k", func(ctx context.Context, tx pgx.Tx) error {
		proxy.HoldReplyOnce([]byte("commit"))
		return insertEffect("k")(ctx, tx)
	})
	require.True(t, proxy.Silenced(), "the COMMIT's answer was held back")
	require.NoError(t, err)
	require.Equal(t, core.Unguarded, out, "the copy's transaction committed")
	require.Equal(t, 2, count(t, direct, "SELECT count(*) FROM effects"))
}

// TestCommitLostInAPartitionSaysWhenItsBackendMayNotBeEnded: when the
// pool's role may not terminate the orphaned backend (another role's, and
// not a member of pg_signal_backend), the TxGuard reports Failed with an
// error that says so and what to grant or set.
func TestCommitLostInAPartitionSaysWhenItsBackendMayNotBeEnded(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	direct, schema := pgtest.Postgres(t)
	migratedStore(t, direct, nil)
	effects(t, direct)
	roles := []string{schema + "_tx", schema + "_reader"}
	t.Cleanup(func() {
		for _, r := range roles {
			_, _ = direct.Exec(context.Background(), fmt.Sprintf("DROP OWNED BY %s; DROP ROLE %s", r, r))
		}
	})
	for _, r := range roles {
		_, err := direct.Exec(ctx, fmt.Sprintf("CREATE ROLE %[1]s LOGIN NOSUPERUSER; GRANT USAGE ON SCHEMA %[2]s TO %[1]s; GRANT ALL ON ALL TABLES IN SCHEMA %[2]s TO %[1]s", r, schema))
		require.NoError(t, err)
	}
	proxy := testenv.StartProxy(t, "127.0.0.1:0", "127.0.0.1:5432")
	cfg, err := pgxpool.ParseConfig("postgres://postgres@" + proxy.Addr() + "/test?sslmode=disable")
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	var dialed atomic.Int32
	cfg.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
		cc.User = roles[min(dialed.Add(1)-1, 1)] // the first connection (the job's) is the other role's
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	t.Cleanup(proxy.Cut)
	s, err := pgstore.New(ctx, pool, nil)
	require.NoError(t, err)
	mode := txWith(t, s, &core.Config{StoreTimeout: 500 * time.Millisecond})

	out, err := mode.Do(ctx, "k", func(ctx context.Context, tx pgx.Tx) error {
		var user string
		require.NoError(t, tx.QueryRow(ctx, "SELECT current_user").Scan(&user))
		require.Equal(t, roles[0], user)
		proxy.LoseRequestOnce([]byte("commit"))
		return insertEffect("k")(ctx, tx)
	})
	require.True(t, proxy.Silenced(), "the COMMIT was lost")
	require.Equal(t, core.Failed, out)
	require.ErrorContains(t, err, "may not terminate it")
	require.ErrorContains(t, err, "pg_signal_backend")
	require.ErrorContains(t, err, "idle_in_transaction_session_timeout")
	t.Log(err)
}

// TestDoTxCopyWaitingForACommitIsDuplicateUnderEveryIsolationDefault: on
// connections that default to each isolation level, a copy whose record
// waits for the first copy's uncommitted record is a Duplicate once that
// commits, not Unavailable, and the effect happens once.
func TestDoTxCopyWaitingForACommitIsDuplicateUnderEveryIsolationDefault(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	pool, schema := pgtest.Postgres(t)
	migratedStore(t, pool, nil)
	effects(t, pool)
	for _, level := range isolationDefaults {
		s := migratedStore(t, isolationPool(t, schema, level, 4), &pgstore.Config{LockTimeout: time.Minute})
		mode := txOf(t, s)
		key := "order-" + level
		pids := make(chan int, 1)
		commit := make(chan struct{})
		first := make(chan error, 1)
		go func() {
			out, err := mode.Do(ctx, key, func(ctx context.Context, tx pgx.Tx) error {
				var pid int
				if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
					return err
				}
				pids <- pid
				<-commit
				return insertEffect(key)(ctx, tx)
			})
			if err == nil && out != core.Ran {
				err = fmt.Errorf("first copy: %s", out)
			}
			first <- err
		}()
		pid := <-pids
		second := make(chan core.Outcome, 1)
		go func() {
			out, err := mode.Do(ctx, key, insertEffect(key))
			if err != nil {
				t.Errorf("%s: second copy: %s: %v", level, out, err)
			}
			second <- out
		}()
		require.Eventually(t, func() bool { return waiters(t, pool, pid) == 1 }, 10*time.Second, 5*time.Millisecond,
			"%s: the second copy's record waits for the first's", level)
		close(commit)
		require.NoError(t, <-first, level)
		require.Equal(t, core.Duplicate, <-second, level)
		require.Equal(t, 1, count(t, pool, "SELECT count(*) FROM effects WHERE key = $1", key), level)
	}
}

// TestRecordTxInARepeatableReadTransactionReportsAKeyCommittedMeanwhileAsRunning:
// a caller's own REPEATABLE READ transaction whose record waited for
// another transaction's record of the key, which then committed, cannot
// read it as done: the key is reported running and the transaction is left
// usable, and a new transaction finds the key done.
func TestRecordTxInARepeatableReadTransactionReportsAKeyCommittedMeanwhileAsRunning(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, pool := newStore(t, &pgstore.Config{LockTimeout: time.Minute, RetryAfter: 3 * time.Second})
	mode := txOf(t, s)

	first, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer first.Rollback(ctx)
	require.Equal(t, driver.StateClaimed, mode.Record(t, ctx, first, "k").State)
	var pid int
	require.NoError(t, first.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))

	second, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer second.Rollback(ctx)
	stored, err := mode.StoredKey("k")
	require.NoError(t, err)
	replies := make(chan driver.ClaimReply, 1)
	go func() {
		reply, err := s.RecordTx(ctx, second, driver.RecordRequest{Key: stored, Retention: time.Hour})
		if err != nil {
			t.Errorf("RecordTx: %v", err)
		}
		replies <- reply
	}()
	require.Eventually(t, func() bool { return waiters(t, pool, pid) == 1 }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, first.Commit(ctx))
	reply := <-replies
	require.Equal(t, driver.StateRunning, reply.State)
	require.Equal(t, 3*time.Second, reply.Remaining, "Config.RetryAfter")
	var one int
	require.NoError(t, second.QueryRow(ctx, "SELECT 1").Scan(&one), "the transaction is usable")
	require.NoError(t, second.Rollback(ctx))

	out, err := mode.Do(ctx, "k", func(context.Context, pgx.Tx) error { return errors.New("must not run") })
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, out)
}

// TestATransactionTheCallerCommitsAfterRecordTxIsFreedByItsConnectionsNextRecord:
// RecordTx used in a caller's own transaction, which the caller commits
// itself (not through CommitTx), leaves the Store holding at most one
// entry per connection: the connection's next recorded transaction
// replaces it, and the first transaction can be garbage collected.
func TestATransactionTheCallerCommitsAfterRecordTxIsFreedByItsConnectionsNextRecord(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, pool := newStore(t, nil)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()

	var freed atomic.Bool
	func() {
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		reply, err := s.RecordTx(ctx, tx, driver.RecordRequest{Key: "first", Retention: time.Hour})
		require.NoError(t, err)
		require.Equal(t, driver.StateClaimed, reply.State)
		require.NoError(t, tx.Commit(ctx)) // the caller's own commit
		runtime.SetFinalizer(tx, func(any) { freed.Store(true) })
	}()

	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	reply, err := s.RecordTx(ctx, tx, driver.RecordRequest{Key: "second", Retention: time.Hour})
	require.NoError(t, err)
	require.Equal(t, driver.StateClaimed, reply.State)
	require.NoError(t, s.CommitTx(ctx, tx))

	deadline := time.Now().Add(5 * time.Second)
	for !freed.Load() && time.Now().Before(deadline) {
		runtime.GC()
		runtime.Gosched()
	}
	require.True(t, freed.Load(), "the Store still holds a transaction the caller committed")
	runtime.KeepAlive(s) // the Store lives on: it must not be what frees the transaction
}
