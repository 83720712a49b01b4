package pgstore_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/pgstore"
	"github.com/jobonce/jobonce/internal/batchcall"
	"github.com/jobonce/jobonce/internal/testenv"
)

// TestLockTimeoutRange: PostgreSQL's lock_timeout is an int of milliseconds.
// New accepts exactly the values the server takes, and a store made with the
// largest one claims keys; one millisecond more is refused by New, naming the
// field and the range, instead of failing every claim later.
func TestLockTimeoutRange(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	const largest = math.MaxInt32 * time.Millisecond
	for _, lt := range []time.Duration{largest + time.Millisecond, largest + time.Nanosecond, 90 * 24 * time.Hour, time.Duration(math.MaxInt64)} {
		_, err := pgstore.MigrationSQL(&pgstore.Config{LockTimeout: lt})
		require.ErrorContains(t, err, "jobonce: pgstore: Config.LockTimeout must be between 1ms and 596h31m23.647s", "%s", lt)
		require.ErrorContains(t, err, lt.String())
	}
	_, pool := newStore(t, nil)
	for _, lt := range []time.Duration{largest, time.Millisecond, 1500 * time.Microsecond} {
		s, err := pgstore.New(ctx, pool, &pgstore.Config{LockTimeout: lt})
		require.NoError(t, err, "%s", lt)
		r, err := s.Claim(ctx, claimReq("lt-"+lt.String(), time.Minute))
		require.NoError(t, err, "a claim with LockTimeout %s", lt)
		require.Equal(t, driver.StateClaimed, r.State)
		out, err := txOf(t, s).Do(ctx, "tx-"+lt.String(), func(context.Context, pgx.Tx) error { return nil })
		require.NoError(t, err, "a transactional record with LockTimeout %s", lt)
		require.Equal(t, core.Ran, out)
	}
}

// TestLongestRetentionInTx: the longest time.Duration works as
// the Guard's Retention for transactional records.
func TestLongestRetentionInTx(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, _ := newStore(t, nil)
	mode := txWith(t, s, &core.Config{Retention: time.Duration(math.MaxInt64)})
	for _, want := range []core.Outcome{core.Ran, core.Duplicate} {
		out, err := mode.Do(ctx, "k", func(context.Context, pgx.Tx) error { return nil })
		require.NoError(t, err)
		require.Equal(t, want, out)
	}
}

// TestKeyTooLongForIndex: a key longer than the primary key index can hold
// gives an error saying so, from Claim and from batchcall.Claims, and the other
// requests of the batch are answered.
func TestKeyTooLongForIndex(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, _ := newStore(t, nil)
	long := make([]byte, 5000)
	_, _ = rand.Read(long) // random bytes do not compress below the limit
	_, err := s.Claim(ctx, claimReq(string(long), time.Minute))
	require.ErrorContains(t, err, "key is too long for the primary key index")
	replies, errs := batchcall.Claims(ctx, s, []driver.ClaimRequest{claimReq("short", time.Minute), claimReq(string(long), time.Minute)})
	require.NoError(t, errs[0])
	require.Equal(t, driver.StateClaimed, replies[0].State)
	require.ErrorContains(t, errs[1], "key is too long for the primary key index")
}

// blockKeys holds row locks on keys in a transaction of its own until the
// returned function is called, so statements on those rows wait. It returns
// the holding backend's pid too.
func blockKeys(t *testing.T, pool *pgxpool.Pool, keys ...string) (func(), int) {
	t.Helper()
	ctx := ctxT(t)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	for _, k := range keys {
		_, err := tx.Exec(ctx, "SELECT FROM jobonce_keys WHERE key = $1 FOR UPDATE", []byte(k))
		require.NoError(t, err)
	}
	var pid int
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	return func() { _ = tx.Rollback(context.Background()) }, pid
}

// waiters counts the statements waiting for a lock that backend pid holds.
func waiters(t *testing.T, pool *pgxpool.Pool, pid int) int {
	return count(t, pool, waitersQuery, pid)
}

// requireNoWaiters waits up to 10s until no statement waits for a lock
// that backend pid holds, and otherwise fails listing those that wait.
func requireNoWaiters(t *testing.T, pool *pgxpool.Pool, pid int, when string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); waiters(t, pool, pid) > 0; {
		if time.Now().After(deadline) {
			rows, err := pool.Query(ctxT(t), `SELECT format('pid %s, %s, waiting %s for %s, %s', pid, state, now() - query_start, wait_event, query)
				FROM pg_stat_activity WHERE `+waitersWhere, pid)
			require.NoError(t, err)
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			require.Fail(t, "the cancelled statements were cancelled on the server too", "%s, still waiting:\n%s", when, strings.Join(lines, "\n"))
		}
		time.Sleep(10 * time.Millisecond) // polling the server's view
	}
}

// waitersQuery counts the statements waiting for a row lock that the
// backend $1 holds. Other waits on $1 are not the test's: a CREATE INDEX
// CONCURRENTLY of a parallel test's migration waits (for a virtualxid) on
// every older open transaction in the database, blockKeys' one included.
const waitersQuery = "SELECT count(*) FROM pg_stat_activity WHERE " + waitersWhere

const waitersWhere = `$1 = ANY (pg_blocking_pids(pid)) AND wait_event_type = 'Lock' AND wait_event IN ('transactionid', 'tuple')`

// endWhenWaiting returns a context that ends, its Err then being end
// (context.Canceled, or context.DeadlineExceeded for a deadline that
// passes), once the server shows one more statement waiting behind blocker
// than now. A cancel request that reaches PostgreSQL before its statement
// is ignored, so a context ended by a timer could leave the statement
// waiting out LockTimeout on a loaded machine.
//
// The count is read on the test's pool, so a call under test must not
// need all of its connections.
func endWhenWaiting(t *testing.T, parent context.Context, pool *pgxpool.Pool, blocker int, end error) (context.Context, context.CancelFunc) {
	ctx := &endedContext{Context: parent, done: make(chan struct{})}
	before := waiters(t, pool, blocker)
	stop := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-parent.Done():
				ctx.end(parent.Err())
				return
			case <-tick.C:
				var n int
				if err := pool.QueryRow(parent, waitersQuery, blocker).Scan(&n); err == nil && n > before {
					ctx.end(end)
					return
				}
			}
		}
	}()
	return ctx, func() { close(stop); <-finished; ctx.end(context.Canceled) }
}

// endedContext is a context that ends when its end is called, its Err then
// being the error given. Its own Done channel makes the contexts derived
// from it take their error from its Err.
type endedContext struct {
	context.Context
	once sync.Once
	done chan struct{}
	err  error
}

func (c *endedContext) end(err error) {
	c.once.Do(func() {
		c.err = err
		close(c.done)
	})
}

func (c *endedContext) Done() <-chan struct{} { return c.done }

func (c *endedContext) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// TestCancelledWhileWaiting: calls whose context ends while their statement
// waits on a row lock return promptly with errors wrapping the context's
// error (one per request for the batch calls), and write nothing.
func TestCancelledWhileWaiting(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, pool := newStore(t, &pgstore.Config{LockTimeout: time.Minute})
	keys := []string{"a", "b", "c"}
	claims := make([]driver.ClaimRequest, len(keys))
	completes := make([]driver.CompleteRequest, len(keys))
	for i, k := range keys {
		claims[i] = claimReq(k, time.Minute)
		completes[i] = driver.CompleteRequest{Key: k, Token: claims[i].Token, Result: []byte("r"), Retention: time.Minute}
	}
	_, errs := batchcall.Claims(ctx, s, claims)
	require.NoError(t, errors.Join(errs...))

	unblock, blocker := blockKeys(t, pool, "b")
	defer unblock()
	wait := func(want error, what string, errs ...error) {
		t.Helper()
		for i, err := range errs {
			require.Error(t, err, "%s %d", what, i)
			require.True(t, errors.Is(err, want), "%s %d: want an error wrapping %v, got %v", what, i, want, err)
		}
	}
	for _, c := range []struct {
		want error
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{context.DeadlineExceeded, func() (context.Context, context.CancelFunc) {
			return endWhenWaiting(t, ctx, pool, blocker, context.DeadlineExceeded)
		}},
		{context.Canceled, func() (context.Context, context.CancelFunc) {
			return endWhenWaiting(t, ctx, pool, blocker, context.Canceled)
		}},
	} {
		began := time.Now()
		call := func(what string, f func(context.Context) []error) {
			t.Helper()
			// Each call that gave up has asked the server to cancel its
			// statement: none waits behind the lock any more.
			requireNoWaiters(t, pool, blocker, "before "+what)
			cctx, cancel := c.ctx()
			defer cancel()
			wait(c.want, what, f(cctx)...)
		}
		call("CompleteBatch", func(ctx context.Context) []error { return batchcall.Completes(ctx, s, completes) })
		call("Complete", func(ctx context.Context) []error { return []error{s.Complete(ctx, completes[1])} })
		call("Extend", func(ctx context.Context) []error { return []error{s.Extend(ctx, "b", claims[1].Token, time.Minute)} })
		call("Release", func(ctx context.Context) []error { return []error{s.Release(ctx, "b", claims[1].Token)} })
		require.Less(t, time.Since(began), 20*time.Second, "cancelled calls return promptly")
	}
	// A call that gave up has asked the server to cancel its statement; one
	// that the server finished before the request landed would have taken
	// effect (the outcome of a call that fails is unknown). Wait until no
	// statement waits behind the lock any more, then let go of it.
	requireNoWaiters(t, pool, blocker, "at the end")
	unblock()
	require.Zero(t, count(t, pool, "SELECT count(*) FROM jobonce_keys WHERE token IS NULL"), "no done marker was written")
	require.Equal(t, 3, count(t, pool, "SELECT count(*) FROM jobonce_keys"))
	require.NoError(t, errors.Join(batchcall.Completes(ctx, s, completes)...))
}

// TestClaimCancelledWhileWaiting: a claim waiting on a transactional record
// that is not committed yet returns, when its context ends, errors wrapping
// the context's error, from Claim and for every request of batchcall.Claims.
func TestClaimCancelledWhileWaiting(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, pool := newStore(t, &pgstore.Config{LockTimeout: time.Minute})
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	require.Equal(t, driver.StateClaimed, txOf(t, s).Record(t, ctx, tx, "held").State)
	held, err := txOf(t, s).StoredKey("held")
	require.NoError(t, err)

	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(200*time.Millisecond, cancel)
	_, err = s.Claim(cctx, claimReq(held, time.Minute))
	require.ErrorIs(t, err, context.Canceled)

	cctx, cancel = context.WithCancel(ctx)
	time.AfterFunc(200*time.Millisecond, cancel)
	replies, errs := batchcall.Claims(cctx, s, []driver.ClaimRequest{claimReq("free", time.Minute), claimReq(held, time.Minute)})
	for i, err := range errs {
		require.ErrorIs(t, err, context.Canceled, "request %d", i)
		require.Zero(t, replies[i].State)
	}
	require.Zero(t, count(t, pool, "SELECT count(*) FROM jobonce_keys WHERE key = $1", []byte("free")), "the cancelled batch wrote nothing")

	// A deadline nearer than LockTimeout shortens the wait: the database
	// answers that the key is held before the deadline ends the call.
	dctx, dcancel := context.WithTimeout(ctx, 400*time.Millisecond)
	defer dcancel()
	reply, err := s.Claim(dctx, claimReq(held, time.Minute))
	require.NoError(t, err)
	require.Equal(t, driver.StateRunning, reply.State)
}

// TestHeldKeysShareTheBatchDeadline: in one batch, keys held by open
// transactions share the time left before the deadline, so they are all
// answered as running and a free key among them is claimed. The store keeps
// a quarter of the time left for its round trips: 1 s of StoreTimeout here,
// well over the pauses of a loaded machine (the process descheduled for up
// to 370 ms beside two CPU-bound loops).
func TestHeldKeysShareTheBatchDeadline(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, pool := newStore(t, &pgstore.Config{LockTimeout: 8 * time.Second})
	mode := txOf(t, s)
	holder, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer holder.Rollback(ctx)
	jobs := []core.Job{{Key: "free"}}
	for i := range 6 {
		key := fmt.Sprint("held-", i)
		mode.Record(t, ctx, holder, key)
		jobs = append(jobs, core.Job{Key: key})
	}
	g := testenv.NewGuard(t, s, &core.Config{StoreTimeout: 4 * time.Second}) // well under LockTimeout
	claims := g.Claim(ctx, jobs...)
	require.True(t, claims[0].Runs(), "the free key is claimed")
	for i, c := range claims[1:] {
		res, err := c.Work(ctx, func(context.Context) ([]byte, error) { return nil, errors.New("must not run") })
		require.ErrorIs(t, err, core.ErrRunning, "held key %d", i)
		require.Equal(t, core.Running, res.Outcome)
	}
	res, err := claims[0].Work(ctx, func(context.Context) ([]byte, error) { return nil, nil })
	require.NoError(t, err)
	require.Equal(t, core.Ran, res.Outcome)
	require.Equal(t, []core.Outcome{core.Ran}, g.Finish(ctx, claims[0]))
}

// TestFarDeadlineKeepsTheLockTimeout: a deadline decades away leaves
// LockTimeout as it is: a holder that commits within it is waited for.
func TestFarDeadlineKeepsTheLockTimeout(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, pool := newStore(t, &pgstore.Config{LockTimeout: 5 * time.Second})
	holder, err := pool.Begin(ctx)
	require.NoError(t, err)
	txOf(t, s).Record(t, ctx, holder, "k")
	key, err := txOf(t, s).StoredKey("k")
	require.NoError(t, err)
	committed := make(chan error, 1)
	time.AfterFunc(300*time.Millisecond, func() { committed <- holder.Commit(context.Background()) })
	far, cancel := context.WithDeadline(context.Background(), time.Now().Add(100*365*24*time.Hour))
	defer cancel()
	reply, err := s.Claim(far, claimReq(key, time.Minute))
	require.NoError(t, err)
	require.Equal(t, driver.StateDone, reply.State, "the claim waited for the holder's commit")
	require.NoError(t, <-committed)
}
