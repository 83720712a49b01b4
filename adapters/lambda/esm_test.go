package lambdaonce_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/require"

	lambdaonce "github.com/jobonce/jobonce/adapters/lambda"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/testenv"
)

const (
	crashQueueEnv = "JOBONCE_LAMBDA_CRASH_QUEUE"
	crashARNEnv   = "JOBONCE_LAMBDA_CRASH_ARN"
	crashPrefix   = "JOBONCE_LAMBDA_CRASH_PREFIX"
	crashGate     = 120 // effects the worker makes before it holds its handlers
)

// sendEachTwice sends jobs "job-000"… side by side, each twice, and returns
// their ids.
func sendEachTwice(t testing.TB, q testQueue, jobs int) []string {
	t.Helper()
	ids := make([]string, jobs)
	bodies := make([]string, 0, 2*jobs)
	for i := range ids {
		ids[i] = fmt.Sprintf("job-%03d", i)
		bodies = append(bodies, ids[i], ids[i])
	}
	sendAll(t, newSQS(t), q, bodies, nil)
	return ids
}

// An event source mapping with four concurrent invocations drains a queue
// holding every job twice, some handlers failing once: every job's effect
// happens once, and nothing is left in the queue.
func TestEventSourceMappingRunsEachJobOnce(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	q := createQueue(t, c, 2, false)
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	eff := newEffects(rdb, prefix)
	const jobs = 100
	ids := sendEachTwice(t, q, jobs)

	g := testenv.RedisGuardOn(t, rdb, prefix, &core.Config{Lease: 2 * time.Second})
	var failures atomic.Int64
	failOnce := map[string]*atomic.Bool{}
	for i := 0; i < jobs; i += 7 {
		failOnce[ids[i]] = new(atomic.Bool)
	}
	h := mustWrap(t, g, func(ctx context.Context, m events.SQSMessage) error {
		if f, ok := failOnce[m.Body]; ok && f.CompareAndSwap(false, true) {
			failures.Add(1)
			return fmt.Errorf("%s fails once", m.Body)
		}
		return eff.record(ctx, m.Body)
	}, &lambdaonce.Config{Client: c, QueueURL: q.urlOf})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		esm{c: c, q: q, h: h, timeout: 10 * time.Second}.run(ctx, 4)
	}()
	require.Eventually(t, func() bool { return eff.count() == jobs && drained(t, c, q.url) }, time.Minute, 50*time.Millisecond)
	cancel()
	<-done
	eff.requireOnce(t, ids)
	require.EqualValues(t, len(failOnce), failures.Load())
}

// A worker process running an event source mapping over the Lambda handler
// is killed with SIGKILL while its invocations hold claims, their handlers
// running, as Lambda stops a function at its timeout; a second one finishes
// the queue once those claims have lapsed: no job runs twice, none is
// missing.
//
// The worker makes its first crashGate effects, then holds every handler
// that starts later before its effect, and reports READY once each effect
// it made is recorded in the store. Killing it at that point takes out
// running handlers and live claims, never the one window the design leaves
// open (a crash between a job's effect and its done marker).
func TestLambdaCrash(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, 3, false)
	eff := newEffects(rdb, prefix)

	const jobs = 300
	ids := sendEachTwice(t, q, jobs)

	w := testenv.StartWorker(t, "TestLambdaCrashWorker", crashQueueEnv+"="+q.url, crashARNEnv+"="+q.arn, crashPrefix+"="+prefix)
	line, err := w.WaitFor(time.Minute, func(line string) bool { return strings.HasPrefix(line, "READY ") })
	require.NoError(t, err, "the worker did not get ready")
	require.NoError(t, w.Kill())
	var made, held int
	_, err = fmt.Sscanf(line, "READY effects=%d held=%d", &made, &held)
	require.NoError(t, err)
	require.Positive(t, held, "no handler was in flight at the kill")
	require.Equal(t, made, eff.count(), "effects before the kill")
	t.Logf("killed the worker after %d effects, with %d handlers in flight", made, held)

	g := testenv.RedisGuardOn(t, rdb, prefix, &core.Config{Lease: 2 * time.Second})
	h := mustWrap(t, g, func(ctx context.Context, m events.SQSMessage) error {
		return eff.record(ctx, m.Body)
	}, &lambdaonce.Config{Client: c, QueueURL: q.urlOf})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		esm{c: c, q: q, h: h, timeout: 10 * time.Second}.run(ctx, 4)
	}()
	require.Eventually(t, func() bool { return eff.count() == jobs && drained(t, c, q.url) }, 2*time.Minute, 50*time.Millisecond)
	cancel()
	<-done
	eff.requireOnce(t, ids)
}

// TestLambdaCrashWorker is the worker process of TestLambdaCrash; it does
// nothing unless started by it.
func TestLambdaCrashWorker(t *testing.T) {
	if !testenv.IsWorker(t) {
		return
	}
	c := newSQS(t)
	prefix := os.Getenv(crashPrefix)
	rdb := testenv.Redis(t, "")
	eff := newEffects(rdb, prefix)
	q := testQueue{url: os.Getenv(crashQueueEnv), arn: os.Getenv(crashARNEnv)}

	var made, recorded, passing, held atomic.Int64
	g := testenv.RedisGuardOn(t, rdb, prefix, &core.Config{
		Lease: 2 * time.Second,
		Observer: func(_ context.Context, e core.Event) {
			switch e.Outcome {
			case core.Ran, core.LeaseLost, core.Unrecorded:
				recorded.Add(1)
			}
		},
	})
	h := mustWrap(t, g, func(ctx context.Context, m events.SQSMessage) error {
		passing.Add(1)
		if made.Load() >= crashGate {
			passing.Add(-1)
			held.Add(1)
			<-ctx.Done() // held until the kill
			return ctx.Err()
		}
		time.Sleep(2 * time.Millisecond) // the job's work
		err := eff.record(ctx, m.Body)
		if err == nil {
			made.Add(1)
		}
		passing.Add(-1)
		return err
	}, &lambdaonce.Config{Client: c, QueueURL: q.urlOf})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for {
			if m := made.Load(); m >= crashGate && passing.Load() == 0 && recorded.Load() == m && held.Load() > 0 {
				fmt.Println("READY effects=" + strconv.FormatInt(m, 10) + " held=" + strconv.FormatInt(held.Load(), 10))
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	esm{c: c, q: q, h: h, timeout: time.Minute}.run(ctx, 4)
}
