package asynqonce

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Calls made while a batch is in flight go out together in the next batch,
// and every caller gets its own output.
func TestGroupBatchesConcurrentCalls(t *testing.T) {
	t.Parallel()
	var batches, largest atomic.Int64
	g := &group[int, int]{timeout: time.Second, send: func(_ context.Context, in []int) []int {
		batches.Add(1)
		if n := int64(len(in)); n > largest.Load() {
			largest.Store(n)
		}
		time.Sleep(time.Millisecond) // a round trip
		out := make([]int, len(in))
		for i, v := range in {
			out[i] = v * 2
		}
		return out
	}}
	const callers, calls = 32, 50
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for i := range calls {
				v := c*1000 + i
				if out, ok := g.do(context.Background(), v); !ok || out != 2*v {
					t.Errorf("do(%d) = %d, %t", v, out, ok)
				}
			}
		})
	}
	wg.Wait()
	require.Less(t, batches.Load(), int64(callers*calls/2), "calls should share batches")
	require.Greater(t, largest.Load(), int64(1))
	require.False(t, g.busy)
	require.Empty(t, g.queue)
}

// A lone call is sent at once, with its own context.
func TestGroupLoneCall(t *testing.T) {
	t.Parallel()
	type key struct{}
	ctx := context.WithValue(context.Background(), key{}, "mine")
	g := &group[int, string]{timeout: time.Second, send: func(ctx context.Context, in []int) []string {
		return []string{ctx.Value(key{}).(string)}
	}}
	out, ok := g.do(ctx, 1)
	require.True(t, ok)
	require.Equal(t, "mine", out)
}

// When a batch panics, its other members are told to send on their own, the
// next batch still goes out, and the panic reaches the caller that sent it.
func TestGroupPanicReleasesMembers(t *testing.T) {
	t.Parallel()
	inFlight, proceed := make(chan struct{}), make(chan struct{})
	var calls atomic.Int64
	g := &group[int, int]{timeout: time.Second, send: func(_ context.Context, in []int) []int {
		switch calls.Add(1) {
		case 1:
			close(inFlight)
			<-proceed
			return []int{in[0]}
		case 2:
			panic("store bug")
		}
		return in
	}}
	first := make(chan int, 1)
	go func() { out, _ := g.do(context.Background(), 1); first <- out }()
	<-inFlight
	// Two callers queue behind the first batch; the second batch panics.
	results := make(chan bool, 2)
	panics := make(chan any, 2)
	for v := range 2 {
		go func() {
			defer func() { panics <- recover() }()
			_, ok := g.do(context.Background(), 10+v)
			results <- ok
		}()
	}
	require.Eventually(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.queue) == 2 }, time.Second, time.Millisecond)
	close(proceed)
	require.Equal(t, 1, <-first)
	require.False(t, <-results, "the member of the panicked batch is told to send alone")
	var recovered []any
	for range 2 {
		recovered = append(recovered, <-panics)
	}
	require.Contains(t, recovered, any("store bug"))
	out, ok := g.do(context.Background(), 7)
	require.True(t, ok)
	require.Equal(t, 7, out)
}

// A call that finds no batch in flight, shortly after another call, waits for
// a companion and goes with it as soon as it comes.
func TestGroupLingerPairsCalls(t *testing.T) {
	t.Parallel()
	var sizes []int
	var mu sync.Mutex
	g := &group[int, int]{timeout: time.Second, linger: 5 * time.Second, send: func(_ context.Context, in []int) []int {
		mu.Lock()
		sizes = append(sizes, len(in))
		mu.Unlock()
		return in
	}}
	out, ok := g.do(context.Background(), 1) // no call before it: goes at once
	require.True(t, ok)
	require.Equal(t, 1, out)

	lingering := make(chan int, 1)
	go func() { out, _ := g.do(context.Background(), 2); lingering <- out }()
	require.Eventually(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.waiting != nil }, time.Second, time.Millisecond)
	start := time.Now()
	out, ok = g.do(context.Background(), 3) // the companion
	require.True(t, ok)
	require.Equal(t, 3, out)
	require.Equal(t, 2, <-lingering)
	require.Less(t, time.Since(start), time.Second, "the companion ends the wait")
	require.Equal(t, []int{1, 2}, sizes)
}

// Calls that come one after another wait once, alone, then go at once until
// calls overlap again.
func TestGroupLingerBacksOffForSerialCalls(t *testing.T) {
	t.Parallel()
	const linger = 50 * time.Millisecond
	var sends atomic.Int64
	g := &group[int, int]{timeout: time.Second, linger: linger, send: func(_ context.Context, in []int) []int {
		sends.Add(1)
		return in
	}}
	start := time.Now()
	for i := range 20 {
		out, ok := g.do(context.Background(), i)
		require.True(t, ok)
		require.Equal(t, i, out)
	}
	require.Less(t, time.Since(start), 10*linger, "only one call waits")
	require.EqualValues(t, 20, sends.Load())
	require.True(t, g.alone)
}
