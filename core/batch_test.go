package core

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCoalescerAnswersEveryCallOnce(t *testing.T) {
	var rounds, biggest atomic.Int64
	c := &coalescer[int, int]{timeout: time.Second, one: func(_ context.Context, v int) int {
		rounds.Add(1)
		time.Sleep(time.Millisecond) // a round trip takes time, so calls queue behind it
		return v * 2
	}, send: func(_ context.Context, in []int) []int {
		rounds.Add(1)
		if n := int64(len(in)); n > biggest.Load() {
			biggest.Store(n)
		}
		time.Sleep(time.Millisecond) // a round trip takes time, so calls queue behind it
		out := make([]int, len(in))
		for i, v := range in {
			out[i] = v * 2
		}
		return out
	}}
	const callers = 200
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			require.Equal(t, i*2, c.do(context.Background(), i))
		})
	}
	wg.Wait()
	require.Less(t, rounds.Load(), int64(callers), "concurrent calls shared round trips")
	require.LessOrEqual(t, biggest.Load(), int64(maxBatch))
	require.False(t, c.busy)
	require.Empty(t, c.queue)
}

func TestCoalescerSurvivesAPanickingSend(t *testing.T) {
	var calls atomic.Int64
	c := &coalescer[int, int]{timeout: time.Second, one: func(context.Context, int) int {
		if calls.Add(1) == 1 {
			panic("store exploded")
		}
		return 0
	}}
	require.Panics(t, func() { c.do(context.Background(), 1) })
	require.Equal(t, 0, c.do(context.Background(), 2), "the next call leads a round trip of its own")
	require.False(t, c.busy)
}

func TestCoalescerDetachesSharedRoundTrips(t *testing.T) {
	release, entered := make(chan struct{}), make(chan struct{}, 2)
	var sawCancelled atomic.Bool
	c := &coalescer[int, int]{timeout: time.Second, one: func(context.Context, int) int {
		entered <- struct{}{}
		<-release
		return 0
	}, send: func(ctx context.Context, in []int) []int {
		if ctx.Err() != nil {
			sawCancelled.Store(true)
		}
		return make([]int, len(in))
	}}
	go c.do(context.Background(), 0)
	<-entered // the first round trip is in flight
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() { c.do(cancelled, i) })
	}
	require.Eventually(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.queue) == 3 }, time.Second, time.Millisecond)
	close(release)
	wg.Wait()
	require.False(t, sawCancelled.Load(), "a round trip for several callers does not carry the leader's cancellation")
}
