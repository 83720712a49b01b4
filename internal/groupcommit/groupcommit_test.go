package groupcommit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/internal/stall"
	"github.com/jobonce/jobonce/internal/storecall"
)

func double(_ context.Context, in []int) ([]int, []error) {
	out := make([]int, len(in))
	for i, v := range in {
		out[i] = v * 2
	}
	return out, make([]error, len(in))
}

// hung is a round trip that blocks, ignoring its context, until released.
type hung struct {
	first   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func newHung() *hung { return &hung{entered: make(chan struct{}, 1), release: make(chan struct{})} }

func (h *hung) one(_ context.Context, v int) (int, error) {
	if h.first.CompareAndSwap(false, true) {
		h.entered <- struct{}{}
		<-h.release // the first call hangs
	}
	return v * 2, nil
}

// waitQueued waits until n calls are queued behind the round trip in flight.
func waitQueued[I, O any](t *testing.T, c *Group[I, O], n int) {
	t.Helper()
	require.Eventually(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.queue) == n },
		5*time.Second, time.Millisecond)
}

func TestGroupCommitAnswersEveryCallOnce(t *testing.T) {
	var rounds, biggest atomic.Int64
	c := &Group[int, int]{timeout: time.Second, one: func(_ context.Context, v int) (int, error) {
		rounds.Add(1)
		time.Sleep(time.Millisecond) // a round trip takes time, so calls queue behind it
		return v * 2, nil
	}, send: func(ctx context.Context, in []int) ([]int, []error) {
		rounds.Add(1)
		if n := int64(len(in)); n > biggest.Load() {
			biggest.Store(n)
		}
		time.Sleep(time.Millisecond) // a round trip takes time, so calls queue behind it
		return double(ctx, in)
	}}
	const callers = 200
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			v, err := c.Do(context.Background(), i)
			require.NoError(t, err)
			require.Equal(t, i*2, v)
		})
	}
	wg.Wait()
	require.Less(t, rounds.Load(), int64(callers), "concurrent calls shared round trips")
	require.LessOrEqual(t, biggest.Load(), int64(maxBatch))
	require.Zero(t, c.inFlight)
	require.Empty(t, c.queue)
}

// A panicking round trip fails every call in it: no zero value reads as
// success, and nobody is left waiting.
func TestGroupCommitFailsEveryCallOfAPanickingRound(t *testing.T) {
	h := newHung()
	c := &Group[int, int]{timeout: 10 * time.Second, one: func(ctx context.Context, v int) (int, error) {
		if v < 0 {
			panic("store exploded")
		}
		return h.one(ctx, v)
	}, send: func(context.Context, []int) ([]int, []error) { panic("store exploded") }}
	go c.Do(context.Background(), 0)
	<-h.entered
	errs := make(chan error, 3)
	for i := range 3 {
		go func() { _, err := c.Do(context.Background(), i+1); errs <- err }()
	}
	waitQueued(t, c, 3)
	close(h.release)
	for range 3 {
		require.ErrorIs(t, <-errs, storecall.ErrPanicked)
	}
	_, err := c.Do(context.Background(), -1)
	require.ErrorIs(t, err, storecall.ErrPanicked, "a lone call's panic is its error")
	v, err := c.Do(context.Background(), 2)
	require.NoError(t, err, "the next call leads a round trip of its own")
	require.Equal(t, 4, v)
	require.Zero(t, c.inFlight)
}

func TestGroupCommitFailsABatchWithMissingReplies(t *testing.T) {
	h := newHung()
	c := &Group[int, int]{timeout: 10 * time.Second, one: h.one,
		send: func(_ context.Context, in []int) ([]int, []error) {
			return make([]int, len(in)-1), make([]error, len(in)-1)
		}}
	go c.Do(context.Background(), 0)
	<-h.entered
	errs := make(chan error, 2)
	for i := range 2 {
		go func() { _, err := c.Do(context.Background(), i+1); errs <- err }()
	}
	waitQueued(t, c, 2)
	close(h.release)
	require.ErrorIs(t, <-errs, storecall.ErrBatchReplies)
	require.ErrorIs(t, <-errs, storecall.ErrBatchReplies)
}

// A call queued behind a hung round trip is answered within its own
// context, and without a deadline, within two timeouts by a round trip of
// its own.
func TestGroupCommitAnswersWithinEachCallersBound(t *testing.T) {
	h := newHung()
	defer close(h.release)
	const timeout = 200 * time.Millisecond
	c := &Group[int, int]{timeout: timeout, one: h.one, send: double}
	go c.Do(context.Background(), 0)
	<-h.entered

	stalls := stall.Bound(t)
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Do(short, 1)
	require.ErrorIs(t, err, context.DeadlineExceeded, "its own deadline, not the hung neighbour's")
	stalls.RequireWithin(t, start, timeout, "answered by its own deadline")

	start = time.Now()
	v, err := c.Do(context.Background(), 2)
	require.NoError(t, err, "the store is healthy for this call")
	require.Equal(t, 4, v)
	require.Less(t, time.Since(start), 2*timeout+500*time.Millisecond)
	c.mu.Lock()
	require.Empty(t, c.queue, "calls that left are out of the queue")
	c.mu.Unlock()
}

// A call that makes a round trip on its own is bounded by timeout even
// under a context without a deadline.
func TestGroupCommitBoundsALoneRoundTrip(t *testing.T) {
	c := &Group[int, int]{timeout: 50 * time.Millisecond, one: func(ctx context.Context, _ int) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	}, send: double}
	start := time.Now()
	_, err := c.Do(context.Background(), 1)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), time.Second)
}

// A call in a shared round trip that never returns gives up after two
// timeouts with storecall.ErrStuck.
func TestGroupCommitGivesUpOnAStuckSharedRound(t *testing.T) {
	first, stuck := newHung(), make(chan struct{})
	defer close(stuck)
	const timeout = 100 * time.Millisecond
	c := &Group[int, int]{timeout: timeout, one: first.one,
		send: func(context.Context, []int) ([]int, []error) { <-stuck; return nil, nil }}
	go c.Do(context.Background(), 0)
	<-first.entered
	errs := make(chan error, 2)
	for i := range 2 {
		go func() { _, err := c.Do(context.Background(), i+1); errs <- err }()
	}
	waitQueued(t, c, 2)
	close(first.release) // the queue's round trip now starts, and sticks
	start := time.Now()
	require.ErrorIs(t, <-errs, storecall.ErrStuck, "the follower gives up")
	require.Less(t, time.Since(start), 2*timeout+500*time.Millisecond)
	select {
	case err := <-errs:
		t.Fatalf("the leader of a stuck round trip waits for its store call, got %v", err)
	case <-time.After(timeout):
	}
}

func TestGroupCommitDetachesSharedRoundTrips(t *testing.T) {
	h := newHung()
	var sawCancelled atomic.Bool
	c := &Group[int, int]{timeout: 10 * time.Second, one: h.one, send: func(ctx context.Context, in []int) ([]int, []error) {
		if ctx.Err() != nil {
			sawCancelled.Store(true)
		}
		return double(ctx, in)
	}}
	go c.Do(context.Background(), 0)
	<-h.entered // the first round trip is in flight
	leaderCtx, cancelLeader := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = c.Do(leaderCtx, 1) })
	waitQueued(t, c, 1)
	for i := range 3 {
		wg.Go(func() {
			v, err := c.Do(context.Background(), i+2)
			require.NoError(t, err)
			require.Equal(t, (i+2)*2, v)
		})
	}
	waitQueued(t, c, 4)
	cancelLeader() // the next leader's cancellation
	// It leaves the queue with its own error; the others still share a round trip.
	require.Eventually(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.queue) == 3 }, time.Second, time.Millisecond)
	close(h.release)
	wg.Wait()
	require.False(t, sawCancelled.Load(), "a round trip for several callers does not carry a caller's cancellation")
}

// Calls go at once while a round trip slot is free, and those that find
// every slot in flight share the next round trip: eight callers on four
// slots make fewer round trips than calls, and four or fewer make one each.
func TestGroupCommitBatchesCallsThatFindEverySlotInFlight(t *testing.T) {
	var rounds, alone, calls atomic.Int64
	slow := func() { time.Sleep(time.Millisecond) } // a round trip's latency, not a synchronisation
	c := &Group[int, int]{timeout: 10 * time.Second, slots: RoundTrips,
		one: func(_ context.Context, v int) (int, error) {
			rounds.Add(1)
			alone.Add(1)
			slow()
			return v * 2, nil
		},
		send: func(ctx context.Context, in []int) ([]int, []error) {
			rounds.Add(1)
			slow()
			return double(ctx, in)
		}}
	v, err := c.Do(context.Background(), 1)
	require.NoError(t, err)
	require.Equal(t, 2, v)
	require.EqualValues(t, 1, alone.Load(), "a call to an idle store goes at once, alone")

	callers := func(n int) {
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				for i := range 50 {
					v, err := c.Do(context.Background(), i)
					require.NoError(t, err)
					require.Equal(t, 2*i, v)
					calls.Add(1)
				}
			})
		}
		wg.Wait()
	}
	rounds.Store(0)
	callers(RoundTrips)
	require.Equal(t, calls.Load(), rounds.Load(), "as many callers as slots: each call goes at once")
	rounds.Store(0)
	calls.Store(0)
	callers(2 * RoundTrips)
	t.Logf("%d calls in %d round trips", calls.Load(), rounds.Load())
	require.Less(t, rounds.Load(), calls.Load()*3/4, "calls shared round trips")
	require.Zero(t, c.inFlight)
	require.Empty(t, c.queue)
}

// A round trip that hangs holds nobody up while another slot is free: the
// next calls go beside it at once, and wait for no timeout.
func TestGroupCommitGoesBesideARoundTripThatHangs(t *testing.T) {
	h := newHung()
	const timeout = 10 * time.Second
	c := &Group[int, int]{timeout: timeout, slots: RoundTrips, one: h.one, send: double}
	go c.Do(context.Background(), 0)
	<-h.entered
	start := time.Now()
	for i := 1; i <= 3; i++ {
		v, err := c.Do(context.Background(), i)
		require.NoError(t, err)
		require.Equal(t, 2*i, v)
	}
	require.Less(t, time.Since(start), timeout/10, "answered beside the hung round trip, not after its bound")
	close(h.release)
	require.Eventually(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.inFlight == 0 }, 5*time.Second, time.Millisecond)
}
