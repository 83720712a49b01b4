package asynqonce_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	asynqonce "github.com/jobonce/jobonce/adapters/asynq"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/testenv"
)

// A task whose context ends before its claim is answered gets the context's
// error: the handler does not run, even with FailOpen, it is not reported as
// a store outage, and IsFailure does not charge it a retry. A store that
// does not answer within StoreTimeout under a live context is an outage.
func TestCanceledClaim(t *testing.T) {
	t.Parallel()
	testenv.Short(t)
	var ran atomic.Int64
	handler := asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		ran.Add(1)
		return nil
	})

	t.Run("deadline", func(t *testing.T) {
		t.Parallel()
		var outs testenv.Outcomes
		g, _ := testenv.HangingGuard(t, &core.Config{StoreTimeout: time.Minute, FailOpen: true, Observer: outs.Observe})
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		err := asynqonce.MustMiddleware(g, nil)(handler).ProcessTask(ctx, asynq.NewTask("email", []byte("deadline")))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.NotErrorIs(t, err, core.ErrStoreUnavailable)
		require.False(t, asynqonce.IsFailure(err), "nothing ran: no retry is charged")
		require.EqualValues(t, 1, outs.Get(core.Canceled))
		require.Zero(t, outs.Get(core.Unavailable)+outs.Get(core.Unguarded))
	})
	t.Run("cancel", func(t *testing.T) {
		t.Parallel()
		var outs testenv.Outcomes
		g, store := testenv.HangingGuard(t, &core.Config{StoreTimeout: time.Minute, FailOpen: true, Observer: outs.Observe})
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			<-store.Hung
			cancel()
		}()
		err := asynqonce.MustMiddleware(g, nil)(handler).ProcessTask(ctx, asynq.NewTask("email", []byte("cancel")))
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, core.ErrStoreUnavailable)
		require.False(t, asynqonce.IsFailure(err))
		require.EqualValues(t, 1, outs.Get(core.Canceled))
		require.Zero(t, outs.Get(core.Unavailable)+outs.Get(core.Unguarded))
	})
	t.Run("store timeout", func(t *testing.T) {
		t.Parallel()
		var outs testenv.Outcomes
		g, _ := testenv.HangingGuard(t, &core.Config{StoreTimeout: 300 * time.Millisecond, Observer: outs.Observe})
		err := asynqonce.MustMiddleware(g, nil)(handler).ProcessTask(background(t), asynq.NewTask("email", []byte("timeout")))
		require.ErrorIs(t, err, core.ErrStoreUnavailable)
		require.True(t, asynqonce.IsFailure(err))
		require.EqualValues(t, 1, outs.Get(core.Unavailable))
		require.Zero(t, outs.Get(core.Canceled))
	})
	t.Cleanup(func() { require.Zero(t, ran.Load(), "the handler ran without a claim") })
}

// A copy waiting for its job's running copy (Config.WaitRunning) whose
// context ends stops waiting with the context's error, outcome Canceled;
// IsFailure reports false.
func TestWaitEndsWithContext(t *testing.T) {
	t.Parallel()
	var outs testenv.Outcomes
	g := testenv.RedisGuard(t, &core.Config{Observer: outs.Observe, Logger: quiet})
	started, release := make(chan struct{}), make(chan struct{})
	var runs atomic.Int64
	h := asynqonce.MustMiddleware(g, &asynqonce.Config{WaitRunning: time.Minute})(
		asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
			if runs.Add(1) == 1 {
				close(started)
				<-release
			}
			return nil
		}))
	task := asynq.NewTask("report", []byte("q3"))
	first := make(chan error, 1)
	go func() { first <- h.ProcessTask(background(t), task) }()
	<-started

	ctx, cancel := context.WithCancel(background(t))
	defer time.AfterFunc(500*time.Millisecond, cancel).Stop()
	err := h.ProcessTask(ctx, task)
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, core.ErrRunning)
	require.False(t, asynqonce.IsFailure(err))
	require.EqualValues(t, 1, outs.Get(core.Canceled))
	evs := outs.Events()
	require.Equal(t, core.Canceled, evs[len(evs)-1].Outcome)
	require.Greater(t, evs[len(evs)-1].Waited, 400*time.Millisecond, "it waited for the running copy until its context ended")

	close(release)
	require.NoError(t, <-first)
	require.EqualValues(t, 1, runs.Load())
}

// Under an Asynq server: a task whose Timeout passes while its claim hangs
// does not run and is not an outage; Asynq retries it, and once the store
// answers it runs once.
func TestServerTaskTimeoutDuringHungClaim(t *testing.T) {
	t.Parallel()
	e := newAsynqEnv(t)
	var outs testenv.Outcomes
	g, store := testenv.HangingGuard(t, &core.Config{StoreTimeout: time.Minute, Observer: outs.Observe})
	fx := newEffects()
	h := asynqonce.MustMiddleware(g, nil)(asynq.HandlerFunc(func(_ context.Context, task *asynq.Task) error {
		fx.add(string(task.Payload()))
		return nil
	}))
	e.enqueue(t, asynq.NewTask("job", []byte("timeout")), asynq.Timeout(time.Second), asynq.MaxRetry(5))
	e.start(t, e.serverConfig(2), h)

	require.Eventually(t, func() bool { return outs.Get(core.Canceled) >= 1 }, 20*time.Second, 20*time.Millisecond)
	require.Zero(t, outs.Get(core.Unavailable), "the task's deadline is not a store outage")
	require.Zero(t, fx.total(), "the job ran without a claim")

	store.Hang.Store(false)
	qi := e.waitEmpty(t, 30*time.Second)
	require.Equal(t, 1, fx.count("timeout"))
	require.Zero(t, qi.Archived)
	require.Zero(t, outs.Get(core.Unavailable))
}

// Server.Shutdown while a claim hangs: after ShutdownTimeout Asynq puts the
// task back in its queue without charging a retry and cancels its context;
// the claim ends as Canceled, never as an outage, and the handler does not
// run. The next server runs the job once.
func TestServerShutdownDuringHungClaim(t *testing.T) {
	t.Parallel()
	e := newAsynqEnv(t)
	var outs testenv.Outcomes
	g, store := testenv.HangingGuard(t, &core.Config{StoreTimeout: time.Minute, Observer: outs.Observe})
	fx := newEffects()
	h := asynqonce.MustMiddleware(g, nil)(asynq.HandlerFunc(func(_ context.Context, task *asynq.Task) error {
		fx.add(string(task.Payload()))
		return nil
	}))
	info := e.enqueue(t, asynq.NewTask("job", []byte("shutdown")), asynq.MaxRetry(0))
	cfg := e.serverConfig(2)
	cfg.ShutdownTimeout = 500 * time.Millisecond
	srv := asynq.NewServer(e.opt, cfg)
	require.NoError(t, srv.Start(h))
	select {
	case <-store.Hung:
	case <-time.After(20 * time.Second):
		t.Fatal("the claim did not reach the store")
	}
	start := time.Now()
	srv.Shutdown()
	require.Less(t, time.Since(start), 10*time.Second)

	require.Eventually(t, func() bool { return outs.Get(core.Canceled) == 1 }, 10*time.Second, 20*time.Millisecond)
	require.Zero(t, outs.Get(core.Unavailable))
	require.Zero(t, fx.total())
	ti, err := e.inspector.GetTaskInfo(e.queue, info.ID)
	require.NoError(t, err)
	require.Equal(t, asynq.TaskStatePending, ti.State, "put back in its queue")
	require.Zero(t, ti.Retried, "no retry charged")

	store.Hang.Store(false)
	e.start(t, e.serverConfig(2), h)
	qi := e.waitEmpty(t, 30*time.Second)
	require.Equal(t, 1, fx.count("shutdown"))
	require.Zero(t, qi.Archived)
}
