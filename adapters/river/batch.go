package riveronce

import (
	"context"
	"sync"

	"github.com/jobonce/jobonce/core"
)

// coalescer gathers the requests of concurrent jobs into one store round
// trip (group commit). A request that arrives while no round trip is in
// flight starts one at once, alone; requests that arrive during a round trip
// queue, and when it returns, the first of them leads the next round trip for
// the queue (up to max requests). No goroutine is started: the callers take
// turns, and each returns once its own request is answered.
type coalescer[T any] struct {
	max int
	do  func(reqs []*T)

	mu    sync.Mutex
	busy  bool
	queue []*waiter[T]
}

type waiter[T any] struct {
	req  *T
	done chan bool // true: lead the next round trip; false: req is answered
}

var donePool = sync.Pool{New: func() any { return make(chan bool, 1) }}

// submit runs do for req, with other requests or alone, and returns when req
// has been answered.
func (c *coalescer[T]) submit(req *T) {
	c.mu.Lock()
	if !c.busy {
		c.busy = true
		c.mu.Unlock()
		c.round([]*waiter[T]{{req: req}})
		return
	}
	w := &waiter[T]{req: req, done: donePool.Get().(chan bool)}
	c.queue = append(c.queue, w)
	c.mu.Unlock()
	lead := <-w.done
	donePool.Put(w.done)
	if !lead {
		return
	}
	// This request heads the queue: take it and those behind it.
	c.mu.Lock()
	n := min(len(c.queue), c.max)
	batch := make([]*waiter[T], n)
	copy(batch, c.queue)
	clear(c.queue[:n])
	c.queue = c.queue[n:]
	c.mu.Unlock()
	c.round(batch)
}

// round runs one round trip for batch, whose first request is the caller's,
// hands the lead to the head of the queue (or ends the busy spell), and
// answers the other requests of batch.
func (c *coalescer[T]) round(batch []*waiter[T]) {
	reqs := make([]*T, len(batch))
	for i, w := range batch {
		reqs[i] = w.req
	}
	c.do(reqs)
	c.mu.Lock()
	if len(c.queue) > 0 {
		c.queue[0].done <- true
	} else {
		c.busy = false
	}
	c.mu.Unlock()
	for _, w := range batch[1:] {
		w.done <- false
	}
}

// claimReq is one job's claim in a batch.
type claimReq struct {
	ctx   context.Context
	job   core.Job
	claim *core.Claim
}

// finishReq is one job's done marker in a batch.
type finishReq struct {
	ctx   context.Context
	claim *core.Claim
	out   core.Outcome
}

// batcher claims and finishes the jobs of one guard in batches.
type batcher struct {
	g        *core.Guard
	claims   coalescer[claimReq]
	finishes coalescer[finishReq]
}

func newBatcher(g *core.Guard, max int) *batcher {
	b := &batcher{g: g}
	b.claims = coalescer[claimReq]{max: max, do: b.claimBatch}
	b.finishes = coalescer[finishReq]{max: max, do: b.finishBatch}
	return b
}

func (b *batcher) claimBatch(reqs []*claimReq) {
	jobs := make([]core.Job, len(reqs))
	for i, r := range reqs {
		jobs[i] = r.job
	}
	ctx, cancel := b.batchContext(reqs[0].ctx, len(reqs))
	claims := b.g.Claim(ctx, jobs...)
	cancel()
	for i, r := range reqs {
		r.claim = claims[i]
	}
}

func (b *batcher) finishBatch(reqs []*finishReq) {
	claims := make([]*core.Claim, len(reqs))
	for i, r := range reqs {
		claims[i] = r.claim
	}
	outs := b.g.Finish(reqs[0].ctx, claims...)
	for i, r := range reqs {
		r.out = outs[i]
	}
}

// batchContext is the context of a claim made for several jobs: the
// leader's values, but not its cancellation, which must not fail the others,
// and the guard's StoreTimeout.
func (b *batcher) batchContext(ctx context.Context, n int) (context.Context, context.CancelFunc) {
	if n == 1 {
		return ctx, func() {}
	}
	return context.WithTimeout(context.WithoutCancel(ctx), b.g.Config().StoreTimeout)
}
