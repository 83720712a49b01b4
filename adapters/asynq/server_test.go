package asynqonce_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	asynqonce "github.com/jobonce/jobonce/adapters/asynq"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/testenv"
)

// effects counts the effects of jobs by name.
type effects struct {
	mu sync.Mutex
	n  map[string]int
}

func newEffects() *effects { return &effects{n: make(map[string]int)} }

func (e *effects) add(job string) {
	e.mu.Lock()
	e.n[job]++
	e.mu.Unlock()
}

func (e *effects) count(job string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[job]
}

func (e *effects) total() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	total := 0
	for _, n := range e.n {
		total += n
	}
	return total
}

// Every job enqueued twice back to back (two task IDs, one payload) has its
// effect exactly once; the copies that found their job running were retried
// without being counted as failures, and nothing was archived.
func TestEveryCopyOnce(t *testing.T) {
	t.Parallel()
	e := newAsynqEnv(t)
	var outs testenv.Outcomes
	g := testenv.RedisGuard(t, &core.Config{Lease: 2 * time.Second, Observer: outs.Observe})
	fx := newEffects()

	const jobs = 500
	for i := range jobs {
		payload := []byte("job-" + strconv.Itoa(i))
		e.enqueue(t, asynq.NewTask("effect", payload))
		e.enqueue(t, asynq.NewTask("effect", payload))
	}
	mux := asynq.NewServeMux()
	mux.Use(asynqonce.MustMiddleware(g, nil))
	mux.HandleFunc("effect", func(ctx context.Context, task *asynq.Task) error {
		time.Sleep(2 * time.Millisecond) // the work
		fx.add(string(task.Payload()))
		return nil
	})
	e.start(t, e.serverConfig(16), mux)

	require.Eventually(t, func() bool { return fx.total() >= jobs && outs.Get(core.Duplicate)+outs.Get(core.Ran) == 2*jobs },
		90*time.Second, 50*time.Millisecond, "effects %d, ran %d, duplicates %d", fx.total(), outs.Get(core.Ran), outs.Get(core.Duplicate))
	qi := e.waitEmpty(t, 30*time.Second)
	for i := range jobs {
		require.Equal(t, 1, fx.count("job-"+strconv.Itoa(i)), "job %d", i)
	}
	require.Equal(t, jobs, fx.total())
	require.Zero(t, qi.Archived, "archived")
	require.Zero(t, qi.Failed, "failed today")
	require.Zero(t, qi.FailedTotal, "failed total")
	require.EqualValues(t, jobs, outs.Get(core.Ran))
	require.EqualValues(t, jobs, outs.Get(core.Duplicate))
	t.Logf("running copies retried: %d", outs.Get(core.Running))
}

// A copy with no retries left (MaxRetry(0)) that finds its job running waits
// for the running copy and is acknowledged as a duplicate: 1 effect, nothing
// archived.
func TestNoRetriesLeftWaitsForRunningCopy(t *testing.T) {
	t.Parallel()
	e := newAsynqEnv(t)
	var outs testenv.Outcomes
	g := testenv.RedisGuard(t, &core.Config{Observer: outs.Observe})
	fx := newEffects()
	started := make(chan struct{})
	release := make(chan struct{})

	h := asynqonce.MustMiddleware(g, nil)(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		close(started) // a second run would panic here
		<-release      // the slow copy
		fx.add("slow")
		return asynqonce.SetResult(ctx, []byte("result"))
	}))
	e.start(t, e.serverConfig(4), h)

	e.enqueue(t, asynq.NewTask("slow", []byte("x")), asynq.Retention(time.Hour))
	<-started
	second := e.enqueue(t, asynq.NewTask("slow", []byte("x")), asynq.MaxRetry(0), asynq.Retention(time.Hour))
	require.Eventually(t, func() bool { return e.info(t).Active == 2 }, 10*time.Second, 10*time.Millisecond,
		"the second copy waits for the running copy in its worker slot")
	close(release)

	qi := e.waitEmpty(t, 10*time.Second)
	require.Equal(t, 1, fx.count("slow"))
	require.Zero(t, qi.Archived)
	require.Zero(t, qi.Retry)
	require.EqualValues(t, 1, outs.Get(core.Duplicate))
	info, err := e.inspector.GetTaskInfo(e.queue, second.ID)
	require.NoError(t, err)
	require.Equal(t, asynq.TaskStateCompleted, info.State)
	require.Equal(t, "result", string(info.Result), "the duplicate writes the stored result")
}

// A copy with no retries left runs the job itself when the running copy's
// claim lapses (its worker died), instead of being archived.
func TestNoRetriesLeftRunsWhenClaimLapses(t *testing.T) {
	t.Parallel()
	e := newAsynqEnv(t)
	g := testenv.RedisGuard(t, &core.Config{Lease: time.Second, DisableHeartbeat: true})
	fx := newEffects()
	task := asynq.NewTask("lapse", []byte("y"))

	// A copy that claimed the key and died: its claim is never finished.
	dead := g.Claim(background(t), core.Job{Key: asynqonce.DefaultKey(task), Fingerprint: core.Fingerprint(task.Payload())})
	require.True(t, dead[0].Runs())

	h := asynqonce.MustMiddleware(g, nil)(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		fx.add("lapse")
		return nil
	}))
	e.start(t, e.serverConfig(2), h)
	e.enqueue(t, task, asynq.MaxRetry(0))

	qi := e.waitEmpty(t, 10*time.Second)
	require.Equal(t, 1, fx.count("lapse"))
	require.Zero(t, qi.Archived)
}

// A handler error releases the claim and goes to Asynq's retry, which runs
// the job: one effect.
func TestHandlerErrorIsRetried(t *testing.T) {
	t.Parallel()
	e := newAsynqEnv(t)
	g := testenv.RedisGuard(t, nil)
	fx := newEffects()
	var attempts atomic.Int64
	h := asynqonce.MustMiddleware(g, nil)(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		if attempts.Add(1) == 1 {
			return errors.New("transient")
		}
		fx.add("flaky")
		return nil
	}))
	e.start(t, e.serverConfig(2), h)
	info := e.enqueue(t, asynq.NewTask("flaky", []byte("z")), asynq.Retention(time.Hour))

	qi := e.waitEmpty(t, 15*time.Second)
	require.Equal(t, 1, fx.count("flaky"))
	require.EqualValues(t, 2, attempts.Load())
	require.Zero(t, qi.Archived)
	ti, err := e.inspector.GetTaskInfo(e.queue, info.ID)
	require.NoError(t, err)
	require.Equal(t, 1, ti.Retried, "a real failure is charged a retry")
}

// Two different payloads under one key are a conflict: the second task is
// archived at once (SkipRetry) and its handler never runs.
func TestConflictIsArchived(t *testing.T) {
	t.Parallel()
	e := newAsynqEnv(t)
	var outs testenv.Outcomes
	g := testenv.RedisGuard(t, &core.Config{Observer: outs.Observe})
	fx := newEffects()
	cfg := &asynqonce.Config{Key: func(t *asynq.Task) string { return "order:" + t.Headers()["order"] }}
	h := asynqonce.MustMiddleware(g, cfg)(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		fx.add(string(task.Payload()))
		return nil
	}))
	headers := map[string]string{"order": "7"}
	e.enqueue(t, asynq.NewTaskWithHeaders("charge", []byte("amount=10"), headers))
	e.start(t, e.serverConfig(1), h)
	require.Eventually(t, func() bool { return fx.count("amount=10") == 1 }, 10*time.Second, 10*time.Millisecond)
	e.enqueue(t, asynq.NewTaskWithHeaders("charge", []byte("amount=99"), headers))

	require.Eventually(t, func() bool { return e.info(t).Archived == 1 }, 10*time.Second, 10*time.Millisecond)
	archived, err := e.inspector.ListArchivedTasks(e.queue)
	require.NoError(t, err)
	require.Len(t, archived, 1)
	require.Contains(t, archived[0].LastErr, "key reused with a different payload")
	require.Equal(t, 0, archived[0].Retried, "archived without retries")
	require.Zero(t, fx.count("amount=99"))
	require.EqualValues(t, 1, outs.Get(core.Conflict))
}

// Task types in UnguardedTypes run every copy, reported as Unguarded.
func TestUnguardedTypes(t *testing.T) {
	t.Parallel()
	e := newAsynqEnv(t)
	var outs testenv.Outcomes
	g := testenv.RedisGuard(t, &core.Config{Observer: outs.Observe})
	fx := newEffects()
	mux := asynq.NewServeMux()
	mux.Use(asynqonce.MustMiddleware(g, &asynqonce.Config{UnguardedTypes: []string{"ping"}}))
	mux.HandleFunc("ping", func(ctx context.Context, task *asynq.Task) error {
		fx.add("ping")
		return nil
	})
	for range 3 {
		e.enqueue(t, asynq.NewTask("ping", nil))
	}
	e.start(t, e.serverConfig(2), mux)
	e.waitEmpty(t, 10*time.Second)
	require.Equal(t, 3, fx.count("ping"))
	require.EqualValues(t, 3, outs.Get(core.Unguarded))
	require.Zero(t, outs.Get(core.Ran))
}

// EnqueueOnce enqueues a key once per window.
func TestEnqueueOnce(t *testing.T) {
	t.Parallel()
	e := newAsynqEnv(t)
	g := testenv.RedisGuard(t, nil)
	ctx := background(t)
	task := asynq.NewTask("report", []byte("2026-11"))

	info, err := asynqonce.EnqueueOnce(ctx, g, e.client, task, "report:2026-11", time.Minute, asynq.Queue(e.queue))
	require.NoError(t, err)
	require.Equal(t, e.queue, info.Queue)
	_, err = asynqonce.EnqueueOnce(ctx, g, e.client, task, "report:2026-11", time.Minute, asynq.Queue(e.queue))
	require.ErrorIs(t, err, asynqonce.ErrAlreadyEnqueued)
	require.ErrorIs(t, err, asynq.ErrDuplicateTask)
	_, err = asynqonce.EnqueueOnce(ctx, g, e.client, task, "", time.Minute, asynq.Queue(e.queue))
	require.NoError(t, err, "the default key differs from the custom one")
	require.Equal(t, 2, e.info(t).Pending)
}

// A failed enqueue releases its key at once, so the next attempt enqueues.
func TestEnqueueOnceReleasesOnFailure(t *testing.T) {
	t.Parallel()
	e := newAsynqEnv(t)
	g := testenv.RedisGuard(t, nil)
	ctx := background(t)
	task := asynq.NewTask("report", []byte("2026-12"))

	failing := enqueuerFunc(func(context.Context, *asynq.Task, ...asynq.Option) (*asynq.TaskInfo, error) {
		return nil, errors.New("broker down")
	})
	_, err := asynqonce.EnqueueOnce(ctx, g, failing, task, "", time.Hour, asynq.Queue(e.queue))
	require.EqualError(t, err, "broker down")
	_, err = asynqonce.EnqueueOnce(ctx, g, e.client, task, "", time.Hour, asynq.Queue(e.queue))
	require.NoError(t, err)
	require.Equal(t, 1, e.info(t).Pending)
}

type enqueuerFunc func(ctx context.Context, task *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error)

func (f enqueuerFunc) EnqueueContext(ctx context.Context, task *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error) {
	return f(ctx, task, opts...)
}

// TestShadowModeAndJobContext: on a real Asynq server, the handler's
// context carries the job's idempotency key (the same for both copies) and,
// under a claim, its fence; in shadow mode the duplicate runs too, reported
// with WouldSkip, and every event names Asynq and the task type.
func TestShadowModeAndJobContext(t *testing.T) {
	t.Parallel()
	e := newAsynqEnv(t)
	var outs testenv.Outcomes
	g := testenv.RedisGuard(t, &core.Config{Shadow: true, Observer: outs.Observe})
	keys := make(chan string, 2)
	task := asynq.NewTask("invoice", []byte("42"))
	e.enqueue(t, task)
	e.enqueue(t, task)
	h := asynqonce.MustMiddleware(g, nil)(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		key, ok := core.IdempotencyKey(ctx)
		require.True(t, ok)
		keys <- key
		return nil
	}))
	e.start(t, e.serverConfig(1), h) // one at a time: the second copy is a duplicate
	first, second := <-keys, <-keys
	require.Equal(t, first, second, "one idempotency key for both copies")
	e.waitEmpty(t, 10*time.Second)
	events := outs.Events()
	require.Len(t, events, 2)
	require.Equal(t, core.Ran, events[0].Outcome)
	require.Equal(t, core.Unguarded, events[1].Outcome)
	require.Equal(t, core.Duplicate, events[1].WouldSkip)
	for _, ev := range events {
		require.Equal(t, "asynq", ev.Source)
		require.Equal(t, "invoice", ev.Kind)
	}
}

// TestDefaultKeyIsTheKeyTheMiddlewareClaims: on a real Asynq server, the key
// the middleware claims for each task (the Guard's Event.Key) is DefaultKey
// of a task made of the type and payload alone.
func TestDefaultKeyIsTheKeyTheMiddlewareClaims(t *testing.T) {
	t.Parallel()
	e := newAsynqEnv(t)
	var outs testenv.Outcomes
	g := testenv.MemGuard(t, &core.Config{Observer: outs.Observe})
	tasks := []*asynq.Task{asynq.NewTask("email:welcome", []byte(`{"user": 42}`)), asynq.NewTask("report", nil)}
	for _, task := range tasks {
		e.enqueue(t, task, asynq.MaxRetry(0))
	}
	mux := asynq.NewServeMux()
	mux.Use(asynqonce.MustMiddleware(g, nil))
	mux.HandleFunc("email:welcome", func(context.Context, *asynq.Task) error { return nil })
	mux.HandleFunc("report", func(context.Context, *asynq.Task) error { return nil })
	e.start(t, e.serverConfig(2), mux)

	require.Eventually(t, func() bool { return outs.Get(core.Ran) == int64(len(tasks)) }, time.Minute, 20*time.Millisecond)
	var claimed []string
	for _, ev := range outs.Events() {
		claimed = append(claimed, ev.Key)
	}
	require.ElementsMatch(t, []string{
		asynqonce.DefaultKey(asynq.NewTask("email:welcome", []byte(`{"user": 42}`))),
		asynqonce.DefaultKey(asynq.NewTask("report", nil)),
	}, claimed)
}
