package groupcommit

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// When a round trip ends while the head of the queue is already leading,
// handOff gives its turn up; when the queue holds more than maxBatch calls,
// the leading head takes maxBatch of them and a free slot leads the rest, so
// no call waits behind a round trip that hangs while a slot is free ("one
// round trip that hangs holds nobody up").
//
// The test makes every round trip in flight end together (they wait on
// c.mu, which the test holds), with GOMAXPROCS=1 so that the later ones'
// handOffs run before the woken head takes its batch, and requires every
// call outside the hung batch to be answered at once, in each of ten
// attempts.
func TestGroupCommitLeavesNoCallQueuedWhileASlotIsFree(t *testing.T) {
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	const timeout = 3 * time.Second
	const slots = RoundTrips
	const queued = maxBatch + 2
	for attempt := range 10 {
		var gates [slots]chan struct{}
		for i := range gates {
			gates[i] = make(chan struct{})
		}
		entered := make(chan struct{}, slots)
		bigEntered, releaseBig := make(chan struct{}), make(chan struct{})
		var bigOnce sync.Once
		c := &Group[int, int]{timeout: timeout, slots: slots,
			one: func(_ context.Context, v int) (int, error) {
				if v < slots { // the round trips in flight
					entered <- struct{}{}
					<-gates[v]
				}
				return v * 2, nil
			},
			send: func(ctx context.Context, in []int) ([]int, []error) {
				if len(in) == maxBatch { // the head's round trip hangs
					bigOnce.Do(func() { close(bigEntered) })
					select {
					case <-releaseBig:
					case <-ctx.Done():
					}
				}
				return double(ctx, in)
			}}
		var wg sync.WaitGroup
		var answered atomic.Int32 // calls answered; those of the hung batch wait for releaseBig
		for v := range slots {
			wg.Go(func() {
				_, _ = c.Do(context.Background(), v)
				answered.Add(1)
			})
			<-entered
		}
		for v := slots; v < queued+slots; v++ {
			wg.Go(func() {
				_, _ = c.Do(context.Background(), v)
				answered.Add(1)
			})
		}
		waitQueued(t, c, queued)
		c.mu.Lock()
		for _, g := range gates {
			close(g)
		}
		time.Sleep(20 * time.Millisecond) // every round trip in flight now waits for c.mu
		c.mu.Unlock()
		select {
		case <-bigEntered:
		case <-time.After(5 * time.Second):
			t.Fatal("the head's batch was never sent")
		}
		c.mu.Lock()
		inFlight, queueLen := c.inFlight, len(c.queue)
		headState := -1
		if queueLen > 0 {
			headState = int(c.queue[0].state)
		}
		c.mu.Unlock()
		// The calls not in the hung batch (the two round trips' callers and
		// the queue's leftovers) are answered at once on a healthy store.
		want := int32(slots + queueLen)
		deadline := time.Now().Add(time.Second)
		for answered.Load() < want && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		got := answered.Load()
		close(releaseBig)
		wg.Wait()
		if got < want {
			t.Fatalf("attempt %d: %d calls left queued behind a hung round trip while a slot was free "+
				"(inFlight %d of %d, head state %d): %d of %d calls answered within 1s, the others waited for their %s bound",
				attempt, queueLen, inFlight, slots, headState, got, want, timeout)
		}
		t.Logf("attempt %d: not stranded (inFlight %d, queue %d)", attempt, inFlight, queueLen)
	}
}
