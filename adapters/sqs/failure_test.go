package sqsonce_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	sqsonce "github.com/jobonce/jobonce/adapters/sqs"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// A handler that fails (or panics) releases its claim and leaves its message
// to be redelivered after Config.FailureDelay; the retry runs the job once.
func TestPollerHandlerFailure(t *testing.T) {
	t.Parallel()
	eachServer(t, testPollerHandlerFailure)
}

func testPollerHandlerFailure(t *testing.T, s server) {
	c := s.client
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, queueSpec{visibility: 30, maxReceive: 5})
	eff := newEffects(rdb, prefix)
	rec := newRecorder(c)

	var mu sync.Mutex
	attempts := map[string][]time.Time{}
	handler := func(ctx context.Context, m types.Message) error {
		body := aws.ToString(m.Body)
		mu.Lock()
		attempts[body] = append(attempts[body], time.Now())
		n := len(attempts[body])
		mu.Unlock()
		if n == 1 {
			if body == "panics-once" {
				panic("first attempt panics")
			}
			return errors.New("first attempt fails")
		}
		return eff.record(ctx, body)
	}
	g := testenv.RedisGuardOn(t, rdb, prefix, nil)
	p := newPoller(t, g, rec, q.url, handler, &sqsonce.PollerConfig{WaitTime: time.Second, Config: sqsonce.Config{FailureDelay: 2 * time.Second}})
	stop := startPoller(t, p)
	ids := []string{"fails-once", "panics-once"}
	sendAll(t, c, q.url, ids)

	require.Eventually(t, func() bool { return eff.count() == 2 }, s.within(20*time.Second), 50*time.Millisecond)
	requireDrained(t, c, q.url, s.within(10*time.Second))
	require.NoError(t, stop())
	eff.requireOnce(t, ids)
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		require.Len(t, attempts[id], 2, id)
		// Redelivered after FailureDelay, not after the 30 s visibility timeout.
		gap := attempts[id][1].Sub(attempts[id][0])
		require.GreaterOrEqual(t, gap, 1500*time.Millisecond, id)
		require.Less(t, gap, s.within(10*time.Second), id)
	}
	st := p.Stats()
	require.EqualValues(t, 2, st.Failed)
	require.EqualValues(t, 2, st.Ran)
	require.EqualValues(t, 2, st.Deleted)
	v, f := depth(t, c, q.dlq)
	require.Zero(t, v+f, "dead-letter queue")
}

// With the store unreachable nothing runs and nothing is deleted (fail
// closed), and the message is hidden for Config.UnavailableDelay instead of
// being received again at once. Once the store is back, the job runs once.
func TestPollerStoreOutage(t *testing.T) {
	t.Parallel()
	eachServer(t, testPollerStoreOutage)
}

func testPollerStoreOutage(t *testing.T, s server) {
	c := s.client
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, queueSpec{visibility: 1, maxReceive: 5})
	eff := newEffects(rdb, prefix)
	rec := newRecorder(c)

	// A Redis client for an address where no server listens.
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = down.Close() })
	store, err := redisstore.New(down, &redisstore.Config{SkipEvictionCheck: true})
	require.NoError(t, err)
	downGuard, err := core.New(store, &core.Config{KeyPrefix: prefix, StoreTimeout: time.Second})
	require.NoError(t, err)

	ran := make(chan struct{}, 1)
	p := newPoller(t, downGuard, rec, q.url, func(context.Context, types.Message) error {
		ran <- struct{}{}
		return nil
	}, &sqsonce.PollerConfig{WaitTime: time.Second, VisibilityTimeout: 2 * time.Second, Config: sqsonce.Config{UnavailableDelay: 6 * time.Second}})
	stop := startPoller(t, p)
	sendAll(t, c, q.url, []string{"during-outage"})
	require.Eventually(t, func() bool { return p.Stats().Unavailable == 1 }, s.within(10*time.Second), 20*time.Millisecond)
	// Received with a 2 s visibility, the message stays hidden longer.
	require.Never(t, func() bool { return p.Stats().Received > 1 }, 4*time.Second, 50*time.Millisecond)
	require.NoError(t, stop())
	require.Empty(t, ran, "the handler ran without a claim")
	require.Empty(t, rec.deletedHandles(), "a message was deleted during the outage")
	v, f := depth(t, c, q.url)
	require.Equal(t, 1, v+f, "the message must stay in the queue")

	up := newPoller(t, testenv.RedisGuardOn(t, rdb, prefix, nil), c, q.url,
		func(ctx context.Context, m types.Message) error { return eff.record(ctx, aws.ToString(m.Body)) },
		&sqsonce.PollerConfig{WaitTime: time.Second})
	startPoller(t, up)
	require.Eventually(t, func() bool { return eff.count() == 1 }, s.within(20*time.Second), 50*time.Millisecond)
	requireDrained(t, c, q.url, s.within(10*time.Second))
	eff.requireOnce(t, []string{"during-outage"})
}

// A key reused for a different body is a conflict: the Poller leaves the
// message alone, counts it, and the redrive policy moves it to the
// dead-letter queue. The Poller asks for the key attribute itself: its
// client returns message attributes only to a receive that names them, as
// SQS does.
func TestPollerConflict(t *testing.T) {
	t.Parallel()
	eachServer(t, testPollerConflict)
}

func testPollerConflict(t *testing.T, s server) {
	c := s.client
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, queueSpec{visibility: 1, maxReceive: 2})
	eff := newEffects(rdb, prefix)
	p := newPoller(t, testenv.RedisGuardOn(t, rdb, prefix, nil), attributesAsAsked{c}, q.url,
		func(ctx context.Context, m types.Message) error { return eff.record(ctx, aws.ToString(m.Body)) },
		&sqsonce.PollerConfig{WaitTime: time.Second, VisibilityTimeout: 2 * time.Second, Config: sqsonce.Config{KeyAttribute: "job"}})
	stop := startPoller(t, p)

	sendKeyed(t, c, q.url, "refund-5", "refund 5 EUR")
	require.Eventually(t, func() bool { return p.Stats().Deleted == 1 }, s.within(10*time.Second), 20*time.Millisecond)
	sendKeyed(t, c, q.url, "refund-5", "refund 500 EUR")
	require.Eventually(t, func() bool {
		v, f, err := depthErr(c, q.dlq)
		return err == nil && v+f == 1
	}, s.within(20*time.Second), 50*time.Millisecond, "the conflicting message did not reach the dead-letter queue")
	require.NoError(t, stop())

	eff.requireOnce(t, []string{"refund 5 EUR"})
	st := p.Stats()
	require.EqualValues(t, 2, st.Conflicts, "one conflict per receive, until the redrive")
	require.EqualValues(t, 1, st.Deleted)
}
