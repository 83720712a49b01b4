package sqsonce_test

import (
	"context"
	"errors"
	"strings"
	"sync"
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

// slowSQS passes every call through, but holds the first DeleteMessageBatch
// or ChangeMessageVisibilityBatch that names a message whose body starts
// with "slow" for delay before sending it: SQS answering slowly.
type slowSQS struct {
	*handles
	delay   time.Duration
	started chan struct{} // closed when the slow call begins

	mu     sync.Mutex
	slowed bool
	ended  time.Time // when the slow call returned
}

func newSlowSQS(c sqsonce.Client, delay time.Duration) *slowSQS {
	return &slowSQS{handles: newHandles(c), delay: delay, started: make(chan struct{})}
}

// hold delays the call if it is the first to name a slow message, and
// returns a function to call when it returned.
func (s *slowSQS) hold(handles []string) func() {
	s.mu.Lock()
	slow := false
	for _, h := range handles {
		slow = slow || strings.HasPrefix(s.body(&h), "slow")
	}
	if !slow || s.slowed {
		s.mu.Unlock()
		return func() {}
	}
	s.slowed = true
	s.mu.Unlock()
	close(s.started)
	time.Sleep(s.delay) // the simulated slow answer
	return func() {
		s.mu.Lock()
		s.ended = time.Now()
		s.mu.Unlock()
	}
}

func (s *slowSQS) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	handles := make([]string, len(in.Entries))
	for i, e := range in.Entries {
		handles[i] = aws.ToString(e.ReceiptHandle)
	}
	defer s.hold(handles)()
	return s.Client.DeleteMessageBatch(ctx, in, opts...)
}

func (s *slowSQS) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	handles := make([]string, len(in.Entries))
	for i, e := range in.Entries {
		handles[i] = aws.ToString(e.ReceiptHandle)
	}
	defer s.hold(handles)()
	return s.Client.ChangeMessageVisibilityBatch(ctx, in, opts...)
}

func (s *slowSQS) slowEnded() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// A finished job's done marker does not wait for its batch's SQS calls: with
// a 2 s lease and one 2.5 s ChangeMessageVisibilityBatch for another message
// of the batch, every job's marker is written before that call returns, no
// lease is lost, and copies received meanwhile are duplicates: each job runs
// once.
func TestPollerMarkerBeforeSlowSQS(t *testing.T) {
	t.Parallel()
	eachServer(t, func(t *testing.T, s server) {
		prefix := testenv.Prefix(t)
		rdb := testenv.Redis(t, prefix)
		q := createQueue(t, s.client, queueSpec{visibility: 30})
		slow := newSlowSQS(s.client, 2500*time.Millisecond)

		var mu sync.Mutex
		runs := map[string]int{}
		ranAt := map[string]time.Time{} // key → when its marker was written
		var lost []string
		g := testenv.RedisGuardOn(t, rdb, prefix, &core.Config{Lease: 2 * time.Second,
			Observer: func(_ context.Context, e core.Event) {
				mu.Lock()
				defer mu.Unlock()
				switch e.Outcome {
				case core.Ran:
					ranAt[e.Key] = time.Now()
				case core.LeaseLost, core.Unrecorded:
					lost = append(lost, e.Key+" "+e.Outcome.String())
				}
			}})
		jobs := []string{"job-1", "job-2", "job-3", "job-4"}
		p := newPoller(t, g, slow, q.url, func(ctx context.Context, m types.Message) error {
			body := aws.ToString(m.Body)
			mu.Lock()
			runs[body]++
			n := runs[body]
			mu.Unlock()
			if body == "slow-fail" {
				if n == 1 {
					return errors.New("fails once")
				}
				return nil
			}
			time.Sleep(300 * time.Millisecond) // the job's work
			return nil
		}, &sqsonce.PollerConfig{Concurrency: 10, WaitTime: time.Second, Config: sqsonce.Config{FailureDelay: time.Second}})
		sendAll(t, s.client, q.url, append([]string{"slow-fail"}, jobs...))
		startPoller(t, p)
		select {
		case <-slow.started:
		case <-time.After(s.within(20 * time.Second)):
			t.Fatal("no SQS call for the failed message")
		}
		// Copies of every job arrive while the slow call is in flight.
		sendAll(t, s.client, q.url, jobs)

		drained := drainedReads(s.client, q.url)
		require.Eventually(t, func() bool { return !slow.slowEnded().IsZero() && drained() },
			s.within(30*time.Second), 50*time.Millisecond, "queue did not drain")

		mu.Lock()
		defer mu.Unlock()
		require.Empty(t, lost, "leases lost")
		for _, j := range jobs {
			require.Equal(t, 1, runs[j], "runs of %s", j)
		}
		require.Equal(t, 2, runs["slow-fail"], "runs of slow-fail; stats %+v; markers written for %v", p.Stats(), ranAt)
		require.Len(t, ranAt, len(jobs)+1)
		name := q.url[strings.LastIndex(q.url, "/")+1:]
		for _, j := range jobs {
			at := ranAt[name+":"+core.Fingerprint([]byte(j))]
			require.False(t, at.IsZero(), "no Ran outcome for %s", j)
			require.True(t, at.Before(slow.slowEnded()), "%s's marker waited for an SQS call of another message", j)
		}
		st := p.Stats()
		require.EqualValues(t, len(jobs)+1, st.Ran)
		require.EqualValues(t, len(jobs), st.Duplicates)
		require.EqualValues(t, 1, st.Failed)
	})
}
