package watermillonce_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	watermillonce "github.com/jobonce/jobonce/adapters/watermill"
	"github.com/jobonce/jobonce/adapters/watermill/internal/watermilltest"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// A copy that finds its job running waits for it, and is then a duplicate
// with the run's produced messages.
func TestCopyWaitsForTheRunningJob(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	var outs testenv.Outcomes
	started, release := make(chan struct{}), make(chan struct{})
	store := testenv.NewAwaits(memstore.New())
	h := watermillonce.MustMiddleware(testenv.NewGuard(t, store, &core.Config{Observer: outs.Observe}), nil)(watermilltest.Blocking(&runs, started, release))
	first := make(chan error, 1)
	go func() { _, err := h(watermilltest.NewMessage("slow")); first <- err }()
	<-started
	type result struct {
		out []*message.Message
		err error
	}
	second := make(chan result, 1)
	go func() {
		out, err := h(watermilltest.NewMessage("slow"))
		second <- result{out, err}
	}()
	require.Eventually(t, func() bool { return store.Count() >= 1 }, 10*time.Second, time.Millisecond,
		"the copy should wait for the completion signal while the job runs")
	select {
	case <-second:
		t.Fatal("the copy returned while the job ran")
	default:
	}
	close(release)
	require.NoError(t, <-first)
	res := <-second
	require.NoError(t, res.err)
	require.Len(t, res.out, 1, "the duplicate returns the run's produced message")
	require.Equal(t, "out", string(res.out[0].Payload))
	require.EqualValues(t, 1, runs.Load())
	require.EqualValues(t, 1, outs.Get(core.Duplicate))
	require.Zero(t, outs.Get(core.Running), "woken by the signal, not polling")
}

// nacked reports whether msg was nacked.
func nacked(msg *message.Message) bool {
	select {
	case <-msg.Nacked():
		return true
	default:
		return false
	}
}

// The wait is bounded by WaitRunning, then the copy is nacked, with no
// error (it is no failure); a negative WaitRunning returns at once; a
// context that ends stops the wait with its own error.
func TestWaitRunningBoundsTheWait(t *testing.T) {
	t.Parallel()
	var outs testenv.Outcomes
	g := testenv.MemGuard(t, &core.Config{Observer: outs.Observe})
	var runs atomic.Int64
	started, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	h := watermillonce.MustMiddleware(g, nil)(watermilltest.Blocking(&runs, started, release))
	go func() { _, _ = h(watermilltest.NewMessage("stuck")) }()
	<-started

	copyWith := func(cfg *watermillonce.Config, ctx context.Context) (time.Duration, *message.Message, error) {
		msg := watermilltest.NewMessage("stuck")
		msg.SetContext(ctx)
		start := time.Now()
		out, err := watermillonce.MustMiddleware(g, cfg)(watermilltest.Blocking(&runs, nil, nil))(msg)
		require.Empty(t, out)
		return time.Since(start), msg, err
	}

	took, msg, err := copyWith(&watermillonce.Config{WaitRunning: 100 * time.Millisecond}, context.Background())
	require.NoError(t, err)
	require.True(t, nacked(msg))
	require.GreaterOrEqual(t, took, 100*time.Millisecond)
	require.Less(t, took, 5*time.Second)
	require.EqualValues(t, 1, outs.Get(core.Running))

	took, msg, err = copyWith(&watermillonce.Config{WaitRunning: -1}, context.Background())
	require.NoError(t, err)
	require.True(t, nacked(msg))
	require.Less(t, took, 100*time.Millisecond, "a negative WaitRunning does not wait")

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	took, msg, err = copyWith(nil, ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.False(t, nacked(msg), "the router nacks on the error")
	require.Less(t, took, 5*time.Second, "the default wait (10s) ends with the context")
	require.EqualValues(t, 1, runs.Load())
}

// While the store cannot be reached, nothing runs and every message is
// nacked with an error matching core.ErrStoreUnavailable, after
// UnavailableDelay, and never sent to the poison queue.
func TestStoreUnavailableFailsClosed(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: testenv.ClosedAddr(t), DialTimeout: 200 * time.Millisecond, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := redisstore.New(rdb, &redisstore.Config{SkipEvictionCheck: true})
	require.NoError(t, err)
	g := testenv.NewGuard(t, store, nil)
	var runs atomic.Int64
	handler := func(*message.Message) ([]*message.Message, error) { runs.Add(1); return nil, nil }

	h := watermillonce.MustMiddleware(g, &watermillonce.Config{UnavailableDelay: 200 * time.Millisecond})(handler)
	start := time.Now()
	_, err = h(watermilltest.NewMessage("job"))
	require.ErrorIs(t, err, core.ErrStoreUnavailable)
	require.False(t, watermillonce.IsPoison(err))
	require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond, "the nack waits UnavailableDelay")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	msg := watermilltest.NewMessage("job")
	msg.SetContext(ctx)
	_, err = h(msg)
	require.ErrorIs(t, err, context.Canceled, "an ended context is not an outage")
	require.NotErrorIs(t, err, core.ErrStoreUnavailable)

	h = watermillonce.MustMiddleware(g, &watermillonce.Config{UnavailableDelay: -1})(handler)
	_, err = h(watermilltest.NewMessage("job"))
	require.ErrorIs(t, err, core.ErrStoreUnavailable)
	require.Zero(t, runs.Load())

	open := watermillonce.MustMiddleware(testenv.NewGuard(t, store, &core.Config{FailOpen: true}), nil)(handler)
	_, err = open(watermilltest.NewMessage("job"))
	require.NoError(t, err, "FailOpen runs the handler unguarded")
	require.EqualValues(t, 1, runs.Load())
}

// A failed handler under a copy that waited: the waiting copy claims the
// freed key and runs the job itself.
func TestWaitingCopyRunsWhenTheRunningCopyFails(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	var outs testenv.Outcomes
	started, release := make(chan struct{}), make(chan struct{})
	store := testenv.NewAwaits(memstore.New())
	h := watermillonce.MustMiddleware(testenv.NewGuard(t, store, &core.Config{Observer: outs.Observe}), nil)(
		func(msg *message.Message) ([]*message.Message, error) {
			if runs.Add(1) == 1 {
				close(started)
				<-release
				return nil, errors.New("failed")
			}
			return nil, nil
		})
	first := make(chan error, 1)
	go func() { _, err := h(watermilltest.NewMessage("job")); first <- err }()
	<-started
	second := make(chan error, 1)
	go func() { _, err := h(watermilltest.NewMessage("job")); second <- err }()
	require.Eventually(t, func() bool { return store.Count() >= 1 }, 10*time.Second, time.Millisecond, "the copy waits")
	close(release)
	require.EqualError(t, <-first, "failed")
	require.NoError(t, <-second)
	require.EqualValues(t, 2, runs.Load())
	require.EqualValues(t, 1, outs.Get(core.Ran), "the waiting copy ran the job")
}

// A copy of a kind that runs longer than its wait goes back at once from
// the Guard, and is held in its handler for WaitRunning all the same, so a
// backend that redelivers at once does not bring it straight back.
func TestCopyOfALongKindIsHeld(t *testing.T) {
	t.Parallel()
	store := testenv.NewAwaits(memstore.New())
	mw := watermillonce.MustMiddleware(testenv.NewGuard(t, store, nil), &watermillonce.Config{WaitRunning: 300 * time.Millisecond})
	ctx := context.Background() // outside a router: the kind of every message is ""
	// Five runs of 600ms: the kind's 90th percentile.
	var wg sync.WaitGroup
	for i := range 5 {
		msg := watermilltest.NewMessage("run-" + strconv.Itoa(i))
		msg.SetContext(ctx)
		wg.Go(func() {
			_, _ = mw(func(*message.Message) ([]*message.Message, error) {
				time.Sleep(600 * time.Millisecond) // the job's own duration
				return nil, nil
			})(msg)
		})
	}
	wg.Wait()
	var runs atomic.Int64
	started, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	h := mw(watermilltest.Blocking(&runs, started, release))
	first := watermilltest.NewMessage("held")
	first.SetContext(ctx)
	go func() { _, _ = h(first) }()
	<-started
	second := watermilltest.NewMessage("held")
	second.SetContext(ctx)
	start := time.Now()
	_, err := h(second)
	require.NoError(t, err)
	require.True(t, nacked(second))
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "held for WaitRunning")
	require.Zero(t, store.Count(), "without waiting for the signal: the kind runs longer than the wait")
	require.EqualValues(t, 1, runs.Load())
}
