package core

import (
	"context"
	"sync"
	"time"
)

// maxBatch bounds how many calls share one store round trip.
const maxBatch = 128

// coalescer gathers concurrent store calls into one round trip (group
// commit). A call that finds no round trip in flight leads one at once;
// calls that arrive during a round trip queue, and when it returns, the
// first of them leads the next round trip for the queue. No goroutine is
// started and nothing delays a call: callers take turns, and each returns
// once its own call is answered. (Yielding before a round trip, to let calls
// already runnable join it, measured slower: it wakes idle threads.)
type coalescer[I, O any] struct {
	one     func(ctx context.Context, in I) O     // a round trip for one call
	send    func(ctx context.Context, in []I) []O // a round trip for several
	timeout time.Duration                         // bounds a round trip made for several callers

	mu    sync.Mutex
	busy  bool
	queue []*pending[I, O]
}

type pending[I, O any] struct {
	ctx  context.Context
	in   I
	out  O
	done chan bool // true: lead the next round trip; false: answered
}

var leadPool = sync.Pool{New: func() any { return make(chan bool, 1) }}

// do sends in, alone or with others, and returns its answer.
func (c *coalescer[I, O]) do(ctx context.Context, in I) O {
	p := &pending[I, O]{ctx: ctx, in: in}
	c.mu.Lock()
	c.queue = append(c.queue, p)
	if c.busy {
		p.done = leadPool.Get().(chan bool)
		c.mu.Unlock()
		lead := <-p.done
		leadPool.Put(p.done)
		if !lead {
			return p.out
		}
	} else {
		c.busy = true
		c.mu.Unlock()
	}
	c.mu.Lock()
	n := min(len(c.queue), maxBatch)
	batch := make([]*pending[I, O], n)
	copy(batch, c.queue)
	clear(c.queue[:n])
	c.queue = c.queue[n:]
	c.mu.Unlock()
	c.round(batch)
	return p.out
}

// round sends batch, whose first call is the caller's, then hands the lead
// to the head of the queue (or ends the busy spell) and answers the others,
// even if send panics.
func (c *coalescer[I, O]) round(batch []*pending[I, O]) {
	defer func() {
		c.mu.Lock()
		if len(c.queue) > 0 {
			c.queue[0].done <- true
		} else {
			c.busy = false
		}
		c.mu.Unlock()
		for _, p := range batch[1:] {
			p.done <- false
		}
	}()
	if len(batch) == 1 {
		batch[0].out = c.one(batch[0].ctx, batch[0].in)
		return
	}
	// The leader's values, not its cancellation, which must not fail the
	// others' calls.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(batch[0].ctx), c.timeout)
	defer cancel()
	in := make([]I, len(batch))
	for i, p := range batch {
		in[i] = p.in
	}
	out := c.send(ctx, in)
	for i, p := range batch {
		p.out = out[i]
	}
}

type claimAnswer struct {
	reply ClaimReply
	err   error
}

// newBatching returns the coalescers of a Guard on a BatchStore.
func newBatching(bs BatchStore, timeout time.Duration) (*coalescer[ClaimRequest, claimAnswer], *coalescer[CompleteRequest, error]) {
	claims := &coalescer[ClaimRequest, claimAnswer]{timeout: timeout, one: func(ctx context.Context, req ClaimRequest) claimAnswer {
		reply, err := bs.Claim(ctx, req)
		return claimAnswer{reply, err}
	}, send: func(ctx context.Context, reqs []ClaimRequest) []claimAnswer {
		out := make([]claimAnswer, len(reqs))
		replies, errs := bs.ClaimBatch(ctx, reqs)
		for i := range out {
			out[i] = claimAnswer{replies[i], errs[i]}
		}
		return out
	}}
	completes := &coalescer[CompleteRequest, error]{timeout: timeout, one: bs.Complete, send: bs.CompleteBatch}
	return claims, completes
}
