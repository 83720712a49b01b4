package sqsonce_test

import (
	"bytes"
	"context"
	"log/slog"
	"path"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	sqsonce "github.com/jobonce/jobonce/adapters/sqs"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/testenv"
)

// 500 jobs, each sent twice side by side, consumed by two Pollers of 8
// handlers each: every effect happens once, the queue drains, and the
// dead-letter queue stays empty.
func TestPollerRunsEachJobOnce(t *testing.T) {
	t.Parallel()
	eachServer(t, func(t *testing.T, s server) {
		jobs := 500
		if s.name == "moto" {
			jobs = 100 // moto answers slowly: fewer jobs, same shape
		}
		testPollerRunsEachJobOnce(t, s, jobs)
	})
}

func testPollerRunsEachJobOnce(t *testing.T, s server, jobs int) {
	c := s.client
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, queueSpec{visibility: 10, maxReceive: 5})
	eff := newEffects(rdb, prefix)

	ids := sendEachTwice(t, c, q.url, jobs)

	handler := func(ctx context.Context, m types.Message) error {
		return eff.record(ctx, aws.ToString(m.Body))
	}
	var pollers [2]*sqsonce.Poller
	var stops [2]func() error
	for i := range pollers {
		// Lease bounds the RetryAfter hint, so copies found running come back soon.
		g := testenv.RedisGuardOn(t, rdb, prefix, &core.Config{Lease: 3 * time.Second})
		pollers[i] = newPoller(t, g, c, q.url, handler, &sqsonce.PollerConfig{Concurrency: 8, WaitTime: time.Second})
		stops[i] = startPoller(t, pollers[i])
	}

	require.Eventually(t, func() bool { return eff.count() == jobs }, s.within(time.Minute), 50*time.Millisecond)
	requireDrained(t, c, q.url, s.within(time.Minute))
	for _, stop := range stops {
		require.NoError(t, stop())
	}
	eff.requireOnce(t, ids)
	v, f := depth(t, c, q.dlq)
	require.Zero(t, v+f, "dead-letter queue")

	var total sqsonce.Stats
	for _, p := range pollers {
		st := p.Stats()
		total.Received += st.Received
		total.Ran += st.Ran
		total.Duplicates += st.Duplicates
		total.Deleted += st.Deleted
		total.DeleteErrors += st.DeleteErrors
		total.Conflicts += st.Conflicts
		total.Failed += st.Failed
	}
	require.EqualValues(t, jobs, total.Ran)
	// Every second copy is a duplicate; a server may deliver a message once
	// more than that (at least once), and that delivery is a duplicate too.
	require.GreaterOrEqual(t, total.Duplicates, int64(jobs))
	require.Equal(t, total.Ran+total.Duplicates, total.Deleted+total.DeleteErrors,
		"every delivery that ran or was done is deleted once, or its delete failed and it came back (stats %+v)", total)
	require.Zero(t, total.Conflicts+total.Failed)
}

// A job runs 15 s with a 2 s lease on a queue whose visibility timeout is
// 4 s and maxReceiveCount 6, while a duplicate is consumed concurrently: one
// effect, the job's own message is received once (its visibility is
// extended), and the duplicate never reaches the dead-letter queue.
func TestPollerLongJobWithDuplicate(t *testing.T) {
	t.Parallel()
	eachServer(t, testPollerLongJobWithDuplicate)
}

func testPollerLongJobWithDuplicate(t *testing.T, s server) {
	c := s.client
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, queueSpec{visibility: 4, maxReceive: 6})
	eff := newEffects(rdb, prefix)
	rec := newRecorder(c)

	var mu sync.Mutex
	var ranID string
	started := make(chan struct{}, 1)
	handler := func(ctx context.Context, m types.Message) error {
		mu.Lock()
		ranID = aws.ToString(m.MessageId)
		mu.Unlock()
		started <- struct{}{}
		select {
		case <-time.After(15 * time.Second):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		return eff.record(ctx, aws.ToString(m.Body))
	}
	var pollers [2]*sqsonce.Poller
	for i := range pollers {
		g := testenv.RedisGuardOn(t, rdb, prefix, &core.Config{Lease: 2 * time.Second})
		pollers[i] = newPoller(t, g, rec, q.url, handler, &sqsonce.PollerConfig{Concurrency: 2, WaitTime: time.Second, VisibilityTimeout: 4 * time.Second})
		startPoller(t, pollers[i])
	}
	sendAll(t, c, q.url, []string{"long-job"})
	select {
	case <-started:
	case <-time.After(s.within(10 * time.Second)):
		t.Fatal("the job did not start")
	}
	// The duplicate arrives while the job runs, so a receive of its own
	// finds the job running.
	sendAll(t, c, q.url, []string{"long-job"})

	require.Eventually(t, func() bool { return eff.count() == 1 }, s.within(30*time.Second), 50*time.Millisecond)
	requireDrained(t, c, q.url, s.within(time.Minute))
	eff.requireOnce(t, []string{"long-job"})
	v, f := depth(t, c, q.dlq)
	require.Zero(t, v+f, "dead-letter queue")
	mu.Lock()
	require.Equal(t, 1, rec.receivesOf(ranID), "the running job's own message was redelivered")
	mu.Unlock()
	var running, dups int64
	for _, p := range pollers {
		running += p.Stats().Running
		dups += p.Stats().Duplicates
	}
	require.EqualValues(t, 1, dups)
	require.Positive(t, running, "the duplicate must have found the job running")
	require.Less(t, running, int64(6), "the duplicate's receives must stay below maxReceiveCount")
	t.Logf("the duplicate was received %d times while the job ran", running+1)
}

// Cancelling Run's context with handlers in flight stops receiving, lets the
// handlers finish within ShutdownTimeout, deletes only messages whose handler
// completed, and hands the rest back to the queue; a second Poller finishes
// them, each once.
func TestPollerGracefulStop(t *testing.T) {
	t.Parallel()
	eachServer(t, testPollerGracefulStop)
}

func testPollerGracefulStop(t *testing.T, s server) {
	c := s.client
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, queueSpec{visibility: 30})
	eff := newEffects(rdb, prefix)
	rec := newRecorder(c)

	// Two stuck jobs outlast the shutdown timeout; the quick ones do not.
	ids := []string{"stuck-1", "quick-1", "quick-2", "stuck-2", "quick-3", "quick-4", "quick-5", "quick-6", "quick-7", "quick-8"}
	sendAll(t, c, q.url, ids)

	var mu sync.Mutex
	completed := map[string]bool{} // receipt handles whose handler succeeded
	started := make(chan string, len(ids))
	firstRun := func(ctx context.Context, m types.Message) error {
		started <- aws.ToString(m.Body)
		wait := 500 * time.Millisecond
		if strings.HasPrefix(aws.ToString(m.Body), "stuck") {
			wait = time.Hour
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if err := eff.record(ctx, aws.ToString(m.Body)); err != nil {
			return err
		}
		mu.Lock()
		completed[aws.ToString(m.ReceiptHandle)] = true
		mu.Unlock()
		return nil
	}
	g := testenv.RedisGuardOn(t, rdb, prefix, nil)
	p := newPoller(t, g, rec, q.url, firstRun, &sqsonce.PollerConfig{Concurrency: 4, WaitTime: time.Second, ShutdownTimeout: 2 * time.Second})
	stop := startPoller(t, p)
	for range 4 {
		select {
		case <-started:
		case <-time.After(s.within(20 * time.Second)):
			t.Fatal("handlers did not start")
		}
	}
	begin := time.Now()
	require.NoError(t, stop())
	took := time.Since(begin)
	// The shutdown timeout, then the hand-back: one SQS call.
	require.Less(t, took, 2*time.Second+s.within(3*time.Second), "Run must return soon after the shutdown timeout")

	mu.Lock()
	done := len(completed)
	for h := range rec.deletedHandles() {
		require.True(t, completed[h], "a message was deleted whose handler did not complete")
	}
	mu.Unlock()
	require.Positive(t, done, "in-flight quick handlers must be allowed to finish")
	require.Equal(t, done, eff.count())
	v, f := depth(t, c, q.url)
	require.Equal(t, len(ids)-done, v+f, "messages lost or deleted early")
	stats := p.Stats()
	require.EqualValues(t, done, stats.Deleted)
	require.EqualValues(t, stats.Received-int64(done), stats.Failed, "unfinished handlers count as failed")

	// Handed back at once, so a second Poller finishes them without waiting
	// for the 30 s visibility timeout.
	finish := func(ctx context.Context, m types.Message) error { return eff.record(ctx, aws.ToString(m.Body)) }
	p2 := newPoller(t, testenv.RedisGuardOn(t, rdb, prefix, nil), c, q.url, finish, &sqsonce.PollerConfig{WaitTime: time.Second})
	startPoller(t, p2)
	require.Eventually(t, func() bool { return eff.count() == len(ids) }, s.within(20*time.Second), 50*time.Millisecond)
	requireDrained(t, c, q.url, s.within(10*time.Second))
	eff.requireOnce(t, ids)
}

// A queue that does not exist stops Run with the error, rather than a
// receive loop that retries forever.
func TestPollerMissingQueue(t *testing.T) {
	t.Parallel()
	eachServer(t, testPollerMissingQueue)
}

func testPollerMissingQueue(t *testing.T, s server) {
	c := s.client
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, queueSpec{})
	p := newPoller(t, testenv.RedisGuardOn(t, rdb, prefix, nil), c, q.url+"-missing",
		func(context.Context, types.Message) error { return nil },
		&sqsonce.PollerConfig{WaitTime: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := p.Run(ctx)
	require.ErrorAs(t, err, new(*types.QueueDoesNotExist))
	require.ErrorContains(t, err, "-missing")
	require.NoError(t, ctx.Err(), "Run must return at once")
}

// No goroutine started by Run outlives it, even when the shutdown deadline
// cancels a handler. (Not parallel: no other Poller may run meanwhile.)
func TestPollerLeavesNoGoroutine(t *testing.T) {
	c := newSQS(t)
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, queueSpec{visibility: 30})
	sendAll(t, c, q.url, []string{"quick", "stuck"})
	started := make(chan struct{}, 2)
	p := newPoller(t, testenv.RedisGuardOn(t, rdb, prefix, nil), c, q.url, func(ctx context.Context, m types.Message) error {
		started <- struct{}{}
		if aws.ToString(m.Body) == "stuck" {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}, &sqsonce.PollerConfig{WaitTime: time.Second, ShutdownTimeout: 500 * time.Millisecond})
	stop := startPoller(t, p)
	for range 2 {
		<-started
	}
	const frame = "jobonce/adapters/sqs.(*"
	require.Contains(t, goroutines(t), frame, "the check must see Run's goroutines while it runs")
	require.NoError(t, stop())
	// A goroutine that has signalled its end may still be returning: allow
	// it a moment, but not a goroutine that is blocked.
	require.Eventually(t, func() bool { return !strings.Contains(goroutines(t), frame) }, time.Second, 10*time.Millisecond,
		"a goroutine of Run is still alive")
}

func goroutines(t *testing.T) string {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, pprof.Lookup("goroutine").WriteTo(&buf, 1))
	return buf.String()
}

// TestPollerShadowModeAndJobContext: in shadow mode the Poller runs and
// deletes both copies of a job (the second reported with WouldSkip); the
// handler's context carries one idempotency key for both; every event names
// SQS and the queue.
func TestPollerShadowModeAndJobContext(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	q := createQueue(t, c, queueSpec{visibility: 30, maxReceive: 5})
	var outs testenv.Outcomes
	g := testenv.RedisGuard(t, &core.Config{Shadow: true, Observer: outs.Observe})
	keys := make(chan string, 2)
	p := newPoller(t, g, c, q.url, func(ctx context.Context, m types.Message) error {
		key, ok := core.IdempotencyKey(ctx)
		require.True(t, ok)
		keys <- key
		return nil
	}, &sqsonce.PollerConfig{WaitTime: time.Second, Concurrency: 1, BatchSize: 1})
	sendAll(t, c, q.url, []string{"ship order 9", "ship order 9"})
	stop := startPoller(t, p)
	first, second := <-keys, <-keys
	require.Equal(t, first, second, "one idempotency key for both copies")
	requireDrained(t, c, q.url, 10*time.Second)
	require.NoError(t, stop())
	var would []core.Outcome
	for _, ev := range outs.Events() {
		require.Equal(t, "sqs", ev.Source)
		require.Equal(t, path.Base(q.url), ev.Kind, "the queue's name")
		would = append(would, ev.WouldSkip)
	}
	// Enforcement would have run one copy and not the other: a Duplicate
	// once the first copy's marker is written, or Running when the second
	// copy's claim comes first (the marker is written after the handler
	// returns, and its event reported then).
	require.Len(t, would, 2)
	slices.Sort(would)
	require.Zero(t, would[0], "one copy enforcement would run: %v", would)
	require.Contains(t, []core.Outcome{core.Duplicate, core.Running}, would[1], "one copy enforcement would skip: %v", would)
}

// A handler that ignores its cancelled context does not hold Run: Run
// returns within ShutdownTimeout plus its 5s grace, with an error matching
// ErrHandlersRunning, and the handler's message is not deleted. Once the
// handler returns, its batch settles the message.
func TestRunReturnsWhileAHandlerIgnoresItsContext(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, queueSpec{visibility: 30})
	sendAll(t, c, q.url, []string{"stubborn"})
	rec := newRecorder(c)
	started, release := make(chan struct{}), make(chan struct{})
	p := newPoller(t, testenv.RedisGuardOn(t, rdb, prefix, nil), rec, q.url, func(context.Context, types.Message) error {
		close(started)
		<-release
		return nil
	}, &sqsonce.PollerConfig{WaitTime: time.Second, ShutdownTimeout: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	<-started
	cancel()
	begin := time.Now()
	bound := time.Second + 5*time.Second + 2*time.Second
	select {
	case err := <-done:
		took := time.Since(begin)
		t.Logf("Run returned %s after its context was cancelled", took.Round(time.Millisecond))
		require.ErrorIs(t, err, sqsonce.ErrHandlersRunning)
		require.ErrorContains(t, err, ": 1,")
	case <-time.After(bound):
		close(release)
		t.Fatalf("Run did not return within %s of its context's end while a handler ignored it", bound)
	}
	require.Empty(t, rec.deletedHandles(), "a message whose handler had not returned was deleted")
	v, f := depth(t, c, q.url)
	require.Equal(t, 1, v+f)

	close(release)
	require.Eventually(t, func() bool { st := p.Stats(); return st.Ran == 1 && st.Deleted == 1 }, 10*time.Second, 10*time.Millisecond,
		"the handler's batch did not settle its message once the handler returned")
}

// A panic in Config.Key fails that message: it is left on the queue, unrun,
// and counted; the Poller goes on with the others.
func TestPollerFailsAMessageWhoseKeyPanics(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, queueSpec{visibility: 2})
	sendAll(t, c, q.url, []string{"ok-1", "boom", "ok-2"})
	var runs runsByID
	p := newPoller(t, testenv.RedisGuardOn(t, rdb, prefix, nil), c, q.url, runs.record, &sqsonce.PollerConfig{WaitTime: time.Second, Config: sqsonce.Config{Key: func(m types.Message) string {
		if aws.ToString(m.Body) == "boom" {
			panic("no key for boom")
		}
		return aws.ToString(m.Body)
	}}})
	stop := startPoller(t, p)
	require.Eventually(t, func() bool { st := p.Stats(); return st.Ran == 2 && st.Failed >= 1 }, 20*time.Second, 10*time.Millisecond)
	require.NoError(t, stop())
	runs.requireEachOnce(t, 2)
	require.EqualValues(t, 2, p.Stats().Deleted)
	v, f := depth(t, c, q.url)
	require.Equal(t, 1, v+f, "the message whose key panicked was deleted")
}

// panicsOnce panics in its first ReceiveMessage, then passes calls through.
type panicsOnce struct {
	sqsonce.Client
	calls atomic.Int32
}

func (p *panicsOnce) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	if p.calls.Add(1) == 1 {
		panic("receive broke")
	}
	return p.Client.ReceiveMessage(ctx, in, opts...)
}

// A panic in the client's ReceiveMessage is a failed receive: the Poller
// retries after its backoff and runs the queue's messages.
func TestPollerRecoversAPanickingReceive(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, queueSpec{visibility: 30})
	sendAll(t, c, q.url, []string{"job-1"})
	var runs runsByID
	client := &panicsOnce{Client: c}
	p := newPoller(t, testenv.RedisGuardOn(t, rdb, prefix, nil), client, q.url, runs.record, &sqsonce.PollerConfig{WaitTime: time.Second})
	stop := startPoller(t, p)
	requireDrained(t, c, q.url, 20*time.Second)
	require.NoError(t, stop())
	runs.requireEachOnce(t, 1)
	require.GreaterOrEqual(t, client.calls.Load(), int32(2))
}

// TestPollerLogsTheFirstSkipAtInfo: one body sent three times to a standard
// queue runs once under the default key; the first skip is logged at Info,
// naming sqsonce's key settings, and the second at Debug.
func TestPollerLogsTheFirstSkipAtInfo(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	q := createQueue(t, c, queueSpec{visibility: 10})
	sendAll(t, c, q.url, []string{"refresh cache", "refresh cache", "refresh cache"})
	var logs testenv.Records
	g := testenv.RedisGuard(t, &core.Config{Logger: logs.Logger()})
	var runs atomic.Int32
	p := newPoller(t, g, c, q.url, func(context.Context, types.Message) error { runs.Add(1); return nil }, &sqsonce.PollerConfig{Concurrency: 1, WaitTime: time.Second})
	stop := startPoller(t, p)
	require.Eventually(t, func() bool { return p.Stats().Deleted == 3 }, time.Minute, 20*time.Millisecond)
	require.NoError(t, stop())
	require.EqualValues(t, 1, runs.Load())

	skips := logs.Where("outcome", "duplicate")
	require.Len(t, skips, 2)
	require.Equal(t, slog.LevelInfo, skips[0].Level)
	require.Contains(t, skips[0].Message, "sqsonce: set Config.KeyAttribute or Config.Key")
	require.Equal(t, path.Base(q.url), skips[0].Attrs["kind"])
	require.Equal(t, slog.LevelDebug, skips[1].Level)
}
