package asynqonce_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	asynqonce "github.com/jobonce/jobonce/adapters/asynq"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/testenv"
)

// These tests call the wrapped handler directly, as a server without a
// ServeMux would, with the in-process store.

func TestDuplicateIsAcknowledged(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	h := asynqonce.MustMiddleware(testenv.MemGuard(t, nil), nil)(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		runs.Add(1)
		return nil
	}))
	ctx := context.Background()
	require.NoError(t, h.ProcessTask(ctx, asynq.NewTask("email", []byte("user-42"))))
	require.NoError(t, h.ProcessTask(ctx, asynq.NewTask("email", []byte("user-42"))))
	require.NoError(t, h.ProcessTask(ctx, asynq.NewTask("email", []byte("user-43"))))
	require.NoError(t, h.ProcessTask(ctx, asynq.NewTask("sms", []byte("user-42"))))
	require.EqualValues(t, 3, runs.Load(), "the key is the type and the payload")
}

func TestRunningCopyIsNotAFailure(t *testing.T) {
	t.Parallel()
	started, release := make(chan struct{}), make(chan struct{})
	h := asynqonce.MustMiddleware(testenv.MemGuard(t, &core.Config{Lease: 10 * time.Second, MaxRetryAfter: 10 * time.Second}), &asynqonce.Config{WaitRunning: -1})(
		asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
			close(started)
			<-release
			return nil
		}))
	ctx := context.Background()
	first := make(chan error, 1)
	go func() { first <- h.ProcessTask(ctx, asynq.NewTask("slow", nil)) }()
	<-started

	err := h.ProcessTask(ctx, asynq.NewTask("slow", nil))
	require.ErrorIs(t, err, core.ErrRunning)
	require.False(t, asynqonce.IsFailure(err))
	hint, ok := core.RetryAfter(err)
	require.True(t, ok)
	require.InDelta(t, 10*time.Second, hint, float64(time.Second))
	fallback := func(int, error, *asynq.Task) time.Duration { return time.Hour }
	require.Equal(t, hint, asynqonce.RetryDelayOr(fallback)(0, err, nil))
	require.Equal(t, hint, asynqonce.RetryDelay(0, err, nil))

	close(release)
	require.NoError(t, <-first)
	require.NoError(t, h.ProcessTask(ctx, asynq.NewTask("slow", nil)), "a duplicate once done")
}

func TestWaitRunning(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	started, release := make(chan struct{}), make(chan struct{})
	var outs testenv.Outcomes
	h := asynqonce.MustMiddleware(testenv.MemGuard(t, &core.Config{Observer: outs.Observe}), &asynqonce.Config{WaitRunning: 10 * time.Second})(
		asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
			if runs.Add(1) == 1 {
				close(started)
				<-release
			}
			return nil
		}))
	ctx := context.Background()
	first := make(chan error, 1)
	go func() { first <- h.ProcessTask(ctx, asynq.NewTask("slow", nil)) }()
	<-started
	second := make(chan error, 1)
	go func() { second <- h.ProcessTask(ctx, asynq.NewTask("slow", nil)) }()
	select {
	case err := <-second:
		t.Fatalf("the second copy should wait, returned %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	require.NoError(t, <-first)
	require.NoError(t, <-second, "acknowledged as a duplicate after waiting")
	require.EqualValues(t, 1, runs.Load())
	require.EqualValues(t, 1, outs.Get(core.Duplicate))
	require.Zero(t, outs.Get(core.Running), "woken by the done marker, not polling")

	// The wait is bounded by WaitRunning.
	stuck := make(chan struct{})
	h = asynqonce.MustMiddleware(testenv.MemGuard(t, nil), &asynqonce.Config{WaitRunning: 50 * time.Millisecond})(
		asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error { close(stuck); <-ctx.Done(); return ctx.Err() }))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = h.ProcessTask(ctx, asynq.NewTask("stuck", nil)) }()
	<-stuck
	start := time.Now()
	err := h.ProcessTask(ctx, asynq.NewTask("stuck", nil))
	require.ErrorIs(t, err, core.ErrRunning)
	require.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
	require.Less(t, time.Since(start), 5*time.Second)
}

func TestHandlerErrorPassesThrough(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	var runs atomic.Int64
	h := asynqonce.MustMiddleware(testenv.MemGuard(t, nil), nil)(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		if runs.Add(1) == 1 {
			return boom
		}
		return nil
	}))
	ctx := context.Background()
	err := h.ProcessTask(ctx, asynq.NewTask("flaky", nil))
	require.Same(t, boom, err, "the handler's error comes back unchanged")
	require.True(t, asynqonce.IsFailure(err))
	require.NoError(t, h.ProcessTask(ctx, asynq.NewTask("flaky", nil)), "the claim was released")
	require.EqualValues(t, 2, runs.Load())
}

func TestConflictSkipsRetry(t *testing.T) {
	t.Parallel()
	cfg := &asynqonce.Config{Key: func(t *asynq.Task) string { return t.Headers()["id"] }}
	h := asynqonce.MustMiddleware(testenv.MemGuard(t, nil), cfg)(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }))
	ctx := context.Background()
	id := map[string]string{"id": "order-1"}
	require.NoError(t, h.ProcessTask(ctx, asynq.NewTaskWithHeaders("charge", []byte("10"), id)))
	err := h.ProcessTask(ctx, asynq.NewTaskWithHeaders("charge", []byte("99"), id))
	require.ErrorIs(t, err, core.ErrConflict)
	require.ErrorIs(t, err, asynq.SkipRetry)
	require.True(t, asynqonce.IsFailure(err))

	// A Fingerprint of "" turns the check off.
	cfg.Fingerprint = func(*asynq.Task) string { return "" }
	h = asynqonce.MustMiddleware(testenv.MemGuard(t, nil), cfg)(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }))
	require.NoError(t, h.ProcessTask(ctx, asynq.NewTaskWithHeaders("charge", []byte("10"), id)))
	require.NoError(t, h.ProcessTask(ctx, asynq.NewTaskWithHeaders("charge", []byte("99"), id)))
}

// TestKeyPolicy: the policy every adapter shares. An empty key is invalid:
// the handler does not run and the task is archived (asynq.SkipRetry),
// reported as Rejected. A type listed in UnguardedTypes runs every time,
// reported as Unguarded.
func TestKeyPolicy(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		task     *asynq.Task
		runs     int64
		outcome  core.Outcome // reported …
		observed int64        // … this many times for the two deliveries
		rejected bool
	}{
		{"empty key", asynq.NewTask("ping", nil), 0, core.Rejected, 2, true},
		{"unguarded type", asynq.NewTask("free", nil), 2, core.Unguarded, 2, false},
		{"named key", asynq.NewTaskWithHeaders("ping", nil, map[string]string{"id": "1"}), 1, core.Duplicate, 1, false},
	} {
		var outs testenv.Outcomes
		var runs atomic.Int64
		cfg := &asynqonce.Config{Key: func(t *asynq.Task) string { return t.Headers()["id"] }, UnguardedTypes: []string{"free"}}
		h := asynqonce.MustMiddleware(testenv.MemGuard(t, &core.Config{Observer: outs.Observe}), cfg)(
			asynq.HandlerFunc(func(context.Context, *asynq.Task) error { runs.Add(1); return nil }))
		for range 2 {
			err := h.ProcessTask(context.Background(), c.task)
			if c.rejected {
				require.ErrorIs(t, err, core.ErrInvalidKey, c.name)
				require.ErrorIs(t, err, asynq.SkipRetry, c.name)
			} else {
				require.NoError(t, err, c.name)
			}
		}
		require.Equal(t, c.runs, runs.Load(), c.name)
		require.Equal(t, c.observed, outs.Get(c.outcome), c.name)
	}
}

func TestSetResultIsStored(t *testing.T) {
	t.Parallel()
	g := testenv.MemGuard(t, nil)
	h := asynqonce.MustMiddleware(g, nil)(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		return asynqonce.SetResult(ctx, []byte("receipt-1"))
	}))
	task := asynq.NewTask("pay", []byte("1"))
	require.NoError(t, h.ProcessTask(context.Background(), task))

	res, err := g.Run(context.Background(), core.Job{Key: asynqonce.DefaultKey(task)}, func(context.Context) ([]byte, error) {
		t.Fatal("the job is done")
		return nil, nil
	})
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, res.Outcome)
	require.Equal(t, "receipt-1", string(res.Value))

	require.ErrorIs(t, asynqonce.SetResult(context.Background(), []byte("x")), asynqonce.ErrNoTask)
}

// Every bad argument and Config field gets an error of its own that names
// the package and the field.
func TestBadInput(t *testing.T) {
	t.Parallel()
	g := testenv.MemGuard(t, nil)
	ctx, task := context.Background(), asynq.NewTask("x", nil)
	never := enqueuerFunc(func(context.Context, *asynq.Task, ...asynq.Option) (*asynq.TaskInfo, error) {
		panic("enqueued despite bad input")
	})
	for _, tc := range []struct {
		call func() error
		want string
	}{
		{func() error { _, err := asynqonce.NewMiddleware(nil, nil); return err }, "jobonce: asynqonce: NewMiddleware: Guard is nil"},
		{func() error {
			_, err := asynqonce.NewMiddleware(g, &asynqonce.Config{PollInterval: -time.Second})
			return err
		}, "jobonce: asynqonce: Config.PollInterval must not be negative, got -1s"},
		{func() error {
			_, err := asynqonce.EnqueueOnce(ctx, nil, never, task, "", time.Minute)
			return err
		}, "jobonce: asynqonce: EnqueueOnce: Guard is nil"},
		{func() error { _, err := asynqonce.EnqueueOnce(ctx, g, nil, task, "", time.Minute); return err }, "jobonce: asynqonce: EnqueueOnce: client is nil"},
		{func() error {
			_, err := asynqonce.EnqueueOnce(ctx, g, (*asynq.Client)(nil), task, "", time.Minute)
			return err
		}, "jobonce: asynqonce: EnqueueOnce: client is nil"},
		{func() error {
			_, err := asynqonce.EnqueueOnce(ctx, g, enqueuerFunc(nil), task, "", time.Minute)
			return err
		}, "jobonce: asynqonce: EnqueueOnce: client is nil"},
		{func() error {
			_, err := asynqonce.EnqueueOnce(ctx, g, never, nil, "", time.Minute)
			return err
		}, "jobonce: asynqonce: EnqueueOnce: task is nil"},
		{func() error { _, err := asynqonce.EnqueueOnce(ctx, g, never, task, "", 0); return err }, "jobonce: core: Enqueue: window must be at least 1ms, got 0s"},
		{func() error { return asynqonce.MustMiddleware(g, nil)(nil).ProcessTask(ctx, task) }, "jobonce: asynqonce: the middleware was given a nil handler"},
		{func() error { return asynqonce.MustMiddleware(g, nil)(asynq.HandlerFunc(nil)).ProcessTask(ctx, task) }, "jobonce: asynqonce: the middleware was given a nil handler"},
	} {
		require.EqualError(t, tc.call(), tc.want)
	}
	require.PanicsWithError(t, "jobonce: asynqonce: NewMiddleware: Guard is nil", func() { asynqonce.MustMiddleware(nil, nil) })
}

func TestIsFailureAndRetryDelay(t *testing.T) {
	t.Parallel()
	running := &core.RunningError{RetryAfter: 3 * time.Second}
	require.False(t, asynqonce.IsFailure(running))
	require.True(t, asynqonce.IsFailure(errors.New("x")))
	require.True(t, asynqonce.IsFailure(core.ErrStoreUnavailable))
	require.True(t, asynqonce.IsFailure(asynq.ErrLeaseExpired))

	delay := asynqonce.RetryDelayOr(func(n int, _ error, _ *asynq.Task) time.Duration { return time.Duration(n) * time.Minute })
	require.Equal(t, 3*time.Second, delay(5, running, nil))
	require.Equal(t, 5*time.Minute, delay(5, errors.New("x"), nil))
	require.Positive(t, asynqonce.RetryDelayOr(nil)(1, errors.New("x"), asynq.NewTask("x", nil)), "nil means Asynq's default")
	require.Equal(t, 3*time.Second, asynqonce.RetryDelay(5, running, nil))
	require.GreaterOrEqual(t, asynqonce.RetryDelay(1, errors.New("x"), asynq.NewTask("x", nil)), 15*time.Second, "Asynq's default for the rest")
}

// A copy delivered while a handler still runs past the Guard's lease (as
// Asynq's recoverer re-delivers a task whose worker stopped extending
// Asynq's lease) is kept out: the heartbeat extends the claim. The lease
// is long enough (1 s, renewed every 333 ms) that a loaded machine's pauses
// (up to 370 ms measured beside two CPU-bound loops) do not lapse it.
func TestHeartbeatKeepsRedeliveryOut(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	var runs atomic.Int64
	started, release := make(chan struct{}), make(chan struct{})
	h := asynqonce.MustMiddleware(testenv.MemGuard(t, &core.Config{Lease: lease, MinRetryAfter: 10 * time.Millisecond}), &asynqonce.Config{WaitRunning: -1})(
		asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
			if runs.Add(1) == 1 {
				close(started)
				<-release
			}
			return nil
		}))
	first := make(chan error, 1)
	go func() { first <- h.ProcessTask(context.Background(), asynq.NewTask("zombie", nil)) }()
	<-started
	deadline := time.Now().Add(3 * lease)
	for time.Now().Before(deadline) {
		require.ErrorIs(t, h.ProcessTask(context.Background(), asynq.NewTask("zombie", nil)), core.ErrRunning)
		time.Sleep(lease / 4)
	}
	close(release)
	require.NoError(t, <-first)
	require.EqualValues(t, 1, runs.Load())
}

// TestUnguardedTypeHasNoIdempotencyKey: a task of an unguarded type has no
// key, so no idempotency key: two different tasks of one type could
// otherwise share one and an API would drop the second.
func TestUnguardedTypeHasNoIdempotencyKey(t *testing.T) {
	t.Parallel()
	var keys []bool
	h := asynqonce.MustMiddleware(testenv.MemGuard(t, nil), &asynqonce.Config{UnguardedTypes: []string{"charge"}})(
		asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			_, ok := core.IdempotencyKey(ctx)
			keys = append(keys, ok)
			return nil
		}))
	require.NoError(t, h.ProcessTask(context.Background(), asynq.NewTask("charge", []byte("order-1"))))
	require.NoError(t, h.ProcessTask(context.Background(), asynq.NewTask("charge", []byte("order-2"))))
	require.Equal(t, []bool{false, false}, keys)
}
