package riveronce

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/pgstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// requireRetried requires err to be an ordinary error for River: neither a
// snooze nor a cancellation.
func requireRetried(t *testing.T, err error) {
	t.Helper()
	var snooze *river.JobSnoozeError
	var cancel *river.JobCancelError
	require.False(t, errors.As(err, &snooze), "snoozed")
	require.False(t, errors.As(err, &cancel), "cancelled: River would never run the job")
}

// A job whose context ends before its claim is answered gets the context's
// error: the worker does not run, even with FailOpen, the job is not
// cancelled, and it is not a store outage. A store that does not answer
// within StoreTimeout under a live context is an outage.
func TestCanceledClaim(t *testing.T) {
	testenv.Short(t)
	t.Parallel()
	var runs atomic.Int32

	t.Run("deadline", func(t *testing.T) {
		t.Parallel()
		var outs testenv.Outcomes
		g, _ := testenv.HangingGuard(t, &core.Config{StoreTimeout: time.Minute, FailOpen: true, Observer: outs.Observe})
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		err := MustMiddleware(g, nil).Work(ctx, row(1, "k", `{"n":1}`), count(&runs))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.NotErrorIs(t, err, core.ErrStoreUnavailable)
		requireRetried(t, err)
		require.EqualValues(t, 1, outs.Get(core.Canceled))
		require.Zero(t, outs.Get(core.Unavailable)+outs.Get(core.Unguarded))
	})
	t.Run("client stop", func(t *testing.T) {
		t.Parallel()
		var outs testenv.Outcomes
		g, store := testenv.HangingGuard(t, &core.Config{StoreTimeout: time.Minute, FailOpen: true, Observer: outs.Observe})
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			<-store.Hung
			cancel()
		}()
		w := MustWrap[noopArgs](g, river.WorkFunc(func(context.Context, *river.Job[noopArgs]) error {
			runs.Add(1)
			return nil
		}), nil)
		err := w.Work(ctx, &river.Job[noopArgs]{JobRow: row(2, "riveronce_noop", `{"n":2}`), Args: noopArgs{N: 2}})
		require.ErrorIs(t, err, context.Canceled, "River makes the job available again without using an attempt")
		require.NotErrorIs(t, err, core.ErrStoreUnavailable)
		requireRetried(t, err)
		require.EqualValues(t, 1, outs.Get(core.Canceled))
		require.Zero(t, outs.Get(core.Unavailable)+outs.Get(core.Unguarded))
	})
	t.Run("store timeout", func(t *testing.T) {
		t.Parallel()
		var outs testenv.Outcomes
		g, _ := testenv.HangingGuard(t, &core.Config{StoreTimeout: 300 * time.Millisecond, Observer: outs.Observe})
		err := MustMiddleware(g, nil).Work(context.Background(), row(3, "k", `{"n":3}`), count(&runs))
		require.ErrorIs(t, err, core.ErrStoreUnavailable)
		requireRetried(t, err)
		require.EqualValues(t, 1, outs.Get(core.Unavailable))
		require.Zero(t, outs.Get(core.Canceled))
	})
	t.Cleanup(func() { require.Zero(t, runs.Load(), "the worker ran without a claim") })
}

// Under a River client: a job whose JobTimeout passes while its claim hangs
// is retried (a failed attempt, as for any job past its timeout), not
// cancelled or discarded, and does not run; once the store answers it runs
// once.
func TestJobTimeoutDuringHungClaim(t *testing.T) {
	testenv.Short(t)
	t.Parallel()
	pool, schema := riverSchema(t)
	var outs testenv.Outcomes
	g, store := testenv.HangingGuard(t, &core.Config{StoreTimeout: time.Minute, Observer: outs.Observe})
	workers := river.NewWorkers()
	river.AddWorker(workers, MustWrap[effectArgs](g, &effectWorker{pool: pool}, nil))
	cfg := clientConfig(schema, workers, 2)
	cfg.JobTimeout = 300 * time.Millisecond
	cfg.Logger = discardLogger()
	startClient(t, pool, cfg)
	_, err := insertClient(t, pool, schema).Insert(context.Background(), effectArgs{N: 1}, &river.InsertOpts{MaxAttempts: 25})
	require.NoError(t, err)

	require.Eventually(t, func() bool { return outs.Get(core.Canceled) >= 1 }, 20*time.Second, 20*time.Millisecond)
	require.Zero(t, outs.Get(core.Unavailable), "the job's timeout is not a store outage")
	require.Zero(t, readEffectStats(t, pool).Rows, "the job ran without a claim")

	store.Hang.Store(false)
	jobs := waitFinished(t, pool, 1, 30*time.Second)
	require.Equal(t, 1, jobs.Completed)
	require.Zero(t, jobs.Cancelled+jobs.Discarded)
	require.Equal(t, effectStats{Rows: 1, Keys: 1}, readEffectStats(t, pool))
	var errText string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT errors[1]->>'error' FROM river_job`).Scan(&errText))
	require.Contains(t, errText, context.DeadlineExceeded.Error())
	require.NotContains(t, errText, core.ErrStoreUnavailable.Error())
}

// Under a River client: StopAndCancel while a claim hangs interrupts the
// job; River makes it available again without using an attempt or recording
// an error, and the next client runs it once.
func TestClientStopDuringHungClaim(t *testing.T) {
	testenv.Short(t)
	t.Parallel()
	pool, schema := riverSchema(t)
	var outs testenv.Outcomes
	g, store := testenv.HangingGuard(t, &core.Config{StoreTimeout: time.Minute, Observer: outs.Observe})
	workers := river.NewWorkers()
	river.AddWorker(workers, MustWrap[effectArgs](g, &effectWorker{pool: pool}, nil))
	cfg := clientConfig(schema, workers, 2)
	cfg.Logger = discardLogger()
	client, err := river.NewClient(riverDriver(pool), cfg)
	require.NoError(t, err)
	require.NoError(t, client.Start(context.Background()))
	_, err = insertClient(t, pool, schema).Insert(context.Background(), effectArgs{N: 1}, nil)
	require.NoError(t, err)
	select {
	case <-store.Hung:
	case <-time.After(20 * time.Second):
		t.Fatal("the claim did not reach the store")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, client.StopAndCancel(ctx))

	require.EqualValues(t, 1, outs.Get(core.Canceled))
	require.Zero(t, outs.Get(core.Unavailable))
	var state string
	var attempt, errs int
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT state, attempt, coalesce(array_length(errors, 1), 0) FROM river_job`).Scan(&state, &attempt, &errs))
	require.Equal(t, "available", state)
	require.Zero(t, attempt, "no attempt used")
	require.Zero(t, errs, "no error recorded")

	store.Hang.Store(false)
	startClient(t, pool, clientConfig(schema, workers, 2))
	jobs := waitFinished(t, pool, 1, 30*time.Second)
	require.Equal(t, 1, jobs.Completed)
	require.Equal(t, effectStats{Rows: 1, Keys: 1}, readEffectStats(t, pool))
}

// WrapTx begins its own transaction and records the key in it: when the
// job's context ends while either waits (for a pool connection, for a lock
// held by another transaction), the error matches ctx.Err(), not
// core.ErrStoreUnavailable, and the job is not cancelled. A begin that fails
// under a live context is an outage.
func TestWorkTxCanceled(t *testing.T) {
	testenv.Short(t)
	t.Parallel()
	pool, _ := riverSchema(t)
	store, err := pgstore.New(context.Background(), pool, &pgstore.Config{Migrate: true, LockTimeout: time.Minute})
	require.NoError(t, err)
	var runs atomic.Int32
	work := func(context.Context, pgx.Tx) error { runs.Add(1); return nil }
	job := &river.Job[noopArgs]{JobRow: row(1, "riveronce_noop", `{"n":1}`), Args: noopArgs{N: 1}}

	t.Run("begin waits for a connection", func(t *testing.T) {
		cfg := pool.Config()
		cfg.MaxConns = 1
		one, err := pgxpool.NewWithConfig(context.Background(), cfg)
		require.NoError(t, err)
		t.Cleanup(one.Close)
		onOne, err := pgstore.New(context.Background(), one, nil)
		require.NoError(t, err)
		held, err := one.Acquire(context.Background())
		require.NoError(t, err)
		defer held.Release()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		err = WorkTx(ctx, txGuard(t, onOne), job, work)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.NotErrorIs(t, err, core.ErrStoreUnavailable)
		requireRetried(t, err)
	})
	t.Run("record waits for a lock", func(t *testing.T) {
		// Another transaction holds the key's record, uncommitted.
		other, err := pool.Begin(context.Background())
		require.NoError(t, err)
		defer func() { _ = other.Rollback(context.Background()) }()
		var cfg Config
		g := testenv.NewGuard(t, store, nil)
		key, err := g.StoredKey(keyed(cfg.job(job.JobRow, job.Args)).Key)
		require.NoError(t, err)
		reply, err := store.RecordTx(context.Background(), other, driver.RecordRequest{Key: key, Retention: time.Hour})
		require.NoError(t, err)
		require.Equal(t, driver.StateClaimed, reply.State)

		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(300*time.Millisecond, cancel)
		err = WorkTx(ctx, txGuard(t, store), job, work)
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, core.ErrStoreUnavailable)
		requireRetried(t, err)
	})
	t.Run("begin fails", func(t *testing.T) {
		closed, err := pgxpool.NewWithConfig(context.Background(), pool.Config())
		require.NoError(t, err)
		down, err := pgstore.New(context.Background(), closed, nil)
		require.NoError(t, err)
		closed.Close()
		err = WorkTx(context.Background(), txGuard(t, down), job, work)
		require.ErrorIs(t, err, core.ErrStoreUnavailable)
	})
	require.Zero(t, runs.Load(), "the job ran")
}
