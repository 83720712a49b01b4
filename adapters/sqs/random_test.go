package sqsonce_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	sqsonce "github.com/jobonce/jobonce/adapters/sqs"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/testenv"
)

// seeded is a random source safe for concurrent use.
type seeded struct {
	mu sync.Mutex
	r  *rand.Rand
}

func (s *seeded) intN(n int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r.IntN(n)
}

func (s *seeded) duration(max time.Duration) time.Duration {
	return time.Duration(s.intN(int(max/time.Millisecond)+1)) * time.Millisecond
}

// testSeed returns JOBONCE_SEED when set, else a fresh seed; either way it
// is logged, so a failing run can be repeated.
func testSeed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("JOBONCE_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "JOBONCE_SEED")
		seed = n
	}
	t.Logf("seed %d (set JOBONCE_SEED=%d to repeat)", seed, seed)
	return seed
}

// jittery delays each batch delete and visibility change by a random time
// (SQS answering slowly), and checks, as each delete is sent, that the job
// of every message it deletes has had its effect.
type jittery struct {
	*handles
	rnd      *seeded
	maxDelay time.Duration
	eff      effects

	mu         sync.Mutex
	violations []string
}

func (j *jittery) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	for _, e := range in.Entries {
		body := j.body(e.ReceiptHandle)
		n, err := j.eff.rdb.HGet(ctx, j.eff.key, body).Int()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		if n == 0 {
			j.mu.Lock()
			j.violations = append(j.violations, body)
			j.mu.Unlock()
		}
	}
	time.Sleep(j.rnd.duration(j.maxDelay)) // the simulated slow answer
	return j.Client.DeleteMessageBatch(ctx, in, opts...)
}

func (j *jittery) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	time.Sleep(j.rnd.duration(j.maxDelay)) // the simulated slow answer
	return j.Client.ChangeMessageVisibilityBatch(ctx, in, opts...)
}

// Randomized: jobs sent one to three times in random order, consumed by two
// Pollers with random batch sizes and flush delays, a 1 s lease, handlers
// that take up to 1.5 s and fail or panic at random, and batch calls that
// SQS answers up to 700 ms late. Every job's effect happens, and once,
// unless its outcome was reported as LeaseLost or Unrecorded; no message is
// deleted before its job's effect; the queue drains and nothing is
// dead-lettered.
func TestPollerRandomized(t *testing.T) {
	t.Parallel()
	eachServer(t, func(t *testing.T, s server) {
		jobs := 120
		if s.name == "moto" {
			jobs = 40
		}
		testPollerRandomized(t, s, jobs)
	})
}

func testPollerRandomized(t *testing.T, s server, jobs int) {
	seed := testSeed(t)
	rnd := &seeded{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	c := s.client
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, queueSpec{visibility: 2, maxReceive: 30})
	eff := newEffects(rdb, prefix)

	var ids, bodies []string
	for i := range jobs {
		id := fmt.Sprintf("job-%03d", i)
		ids = append(ids, id)
		for range 1 + rnd.intN(3) {
			bodies = append(bodies, id)
		}
	}
	rnd.mu.Lock()
	rnd.r.Shuffle(len(bodies), func(i, j int) { bodies[i], bodies[j] = bodies[j], bodies[i] })
	rnd.mu.Unlock()
	sendAll(t, c, q.url, bodies)

	var mu sync.Mutex
	suspect := map[string]string{} // key → LeaseLost or Unrecorded
	observer := func(_ context.Context, e core.Event) {
		if e.Outcome == core.LeaseLost || e.Outcome == core.Unrecorded {
			mu.Lock()
			suspect[e.Key] = e.Outcome.String()
			mu.Unlock()
		}
	}
	handler := func(ctx context.Context, m types.Message) error {
		select {
		case <-time.After(rnd.duration(1500 * time.Millisecond)): // the job's work
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		switch rnd.intN(10) {
		case 0:
			return errors.New("random failure")
		case 1:
			panic("random panic")
		}
		return eff.record(ctx, aws.ToString(m.Body))
	}
	j := &jittery{handles: newHandles(c), rnd: rnd, maxDelay: 700 * time.Millisecond, eff: eff}
	var pollers [2]*sqsonce.Poller
	for i := range pollers {
		g := testenv.RedisGuardOn(t, rdb, prefix, &core.Config{Lease: time.Second, Observer: observer})
		cfg := &sqsonce.PollerConfig{Concurrency: 8, BatchSize: 1 + rnd.intN(10), FlushDelay: rnd.duration(100 * time.Millisecond),
			WaitTime: time.Second, VisibilityTimeout: 2 * time.Second, Config: sqsonce.Config{FailureDelay: time.Second}}
		pollers[i] = newPoller(t, g, j, q.url, handler, cfg)
		startPoller(t, pollers[i])
		t.Logf("poller %d: batch size %d, flush delay %s", i, cfg.BatchSize, cfg.FlushDelay)
	}

	require.Eventually(t, func() bool { return eff.count() == jobs }, s.within(2*time.Minute), 100*time.Millisecond,
		"jobs without an effect (seed %d)", seed)
	requireDrained(t, c, q.url, s.within(time.Minute))
	v, f := depth(t, c, q.dlq)
	require.Zero(t, v+f, "dead-letter queue (seed %d)", seed)

	j.mu.Lock()
	require.Empty(t, j.violations, "messages deleted before their job's effect (seed %d)", seed)
	j.mu.Unlock()
	got := eff.all(t)
	name := q.url[strings.LastIndex(q.url, "/")+1:]
	mu.Lock()
	defer mu.Unlock()
	var total sqsonce.Stats
	for _, p := range pollers {
		st := p.Stats()
		total.Ran += st.Ran
		total.Failed += st.Failed
		total.Duplicates += st.Duplicates
		total.Deleted += st.Deleted
	}
	for _, id := range ids {
		if why, ok := suspect[name+":"+core.Fingerprint([]byte(id))]; ok {
			t.Logf("%s: %s, %d effects", id, why, got[id])
			continue
		}
		require.Equal(t, 1, got[id], "effects of %s (seed %d)", id, seed)
	}
	// A message whose visibility renewal came late may have been received
	// twice and so deleted twice.
	require.GreaterOrEqual(t, total.Deleted, int64(len(bodies)), "deleted (seed %d)", seed)
	require.GreaterOrEqual(t, total.Ran+total.Duplicates, int64(len(bodies)), "ran + duplicates (seed %d)", seed)
	t.Logf("%d messages for %d jobs: %d ran, %d duplicates, %d failed attempts, %d lease lost or unrecorded",
		len(bodies), jobs, total.Ran, total.Duplicates, total.Failed, len(suspect))
}
