package sqsonce_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	sqsonce "github.com/jobonce/jobonce/adapters/sqs"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/testenv"
)

const (
	crashQueueEnv = "JOBONCE_SQS_CRASH_QUEUE"
	crashPrefix   = "JOBONCE_SQS_CRASH_PREFIX"
	crashGate     = 120 // effects the worker makes before it holds its handlers
)

// A Poller process is killed with SIGKILL while it holds claims on messages
// in flight (their handlers running) and may have deletes in flight; a second
// Poller finishes the queue: no job runs twice, none is missing.
//
// The worker makes its first crashGate effects, then holds every handler
// that starts later before its effect, and reports READY once each effect
// it made is recorded in the store. Killing it at that point takes out
// running handlers and live claims, never the one window the design leaves
// open (a crash between a job's effect and its done marker).
func TestPollerCrash(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, queueSpec{visibility: 3, maxReceive: 10})
	eff := newEffects(rdb, prefix)

	const jobs = 300
	ids := sendEachTwice(t, c, q.url, jobs)

	w := testenv.StartWorker(t, "TestCrashWorker", crashQueueEnv+"="+q.url, crashPrefix+"="+prefix)
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
	p := newPoller(t, g, c, q.url, func(ctx context.Context, m types.Message) error {
		return eff.record(ctx, aws.ToString(m.Body))
	}, &sqsonce.PollerConfig{Concurrency: 16, WaitTime: time.Second, VisibilityTimeout: 3 * time.Second})
	stop := startPoller(t, p)
	require.Eventually(t, func() bool { return eff.count() == jobs }, time.Minute, 50*time.Millisecond)
	requireDrained(t, c, q.url, time.Minute)
	require.NoError(t, stop())
	eff.requireOnce(t, ids)
	v, f := depth(t, c, q.dlq)
	require.Zero(t, v+f, "dead-letter queue")
}

// TestCrashWorker is the worker process of TestPollerCrash; it does nothing
// unless started by it.
func TestCrashWorker(t *testing.T) {
	if !testenv.IsWorker(t) {
		return
	}
	c := newSQS(t)
	prefix := os.Getenv(crashPrefix)
	rdb := testenv.Redis(t, "")
	eff := newEffects(rdb, prefix)

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
	p := newPoller(t, g, c, os.Getenv(crashQueueEnv), func(ctx context.Context, m types.Message) error {
		passing.Add(1)
		if made.Load() >= crashGate {
			passing.Add(-1)
			held.Add(1)
			<-ctx.Done() // held until the kill
			return ctx.Err()
		}
		time.Sleep(2 * time.Millisecond) // the job's work
		err := eff.record(ctx, aws.ToString(m.Body))
		if err == nil {
			made.Add(1)
		}
		passing.Add(-1)
		return err
	}, &sqsonce.PollerConfig{Concurrency: 16, WaitTime: time.Second, VisibilityTimeout: 3 * time.Second})
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
	_ = p.Run(ctx)
}
