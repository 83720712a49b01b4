package riveronce

import (
	"context"
	"runtime"
	"sync"

	"github.com/jobonce/jobonce/core"
)

// jobReq is one job's requests to the batcher: its claim, then its done
// marker.
type jobReq struct {
	ctx   context.Context
	job   core.Job
	claim *core.Claim
	done  chan bool // true: lead the next round trip; false: answered
}

var donePool = sync.Pool{New: func() any { return make(chan bool, 1) }}

// coalescer gathers the requests of concurrent jobs into one store round
// trip (group commit). A request that arrives while no round trip is in
// flight leads one at once, after a yield that lets other runnable jobs join
// it; requests that arrive during a round trip queue, and when it returns,
// the first of them leads the next round trip for the queue (up to max
// requests). No goroutine is started and no timer delays anyone: the callers
// take turns, and each returns once its own request is answered.
type coalescer struct {
	max int
	do  func(reqs []*jobReq)

	mu    sync.Mutex
	busy  bool
	queue []*jobReq
}

// submit runs do for req, with other requests or alone, and returns when req
// has been answered.
func (c *coalescer) submit(req *jobReq) {
	c.mu.Lock()
	c.queue = append(c.queue, req)
	if c.busy {
		req.done = donePool.Get().(chan bool)
		c.mu.Unlock()
		lead := <-req.done
		donePool.Put(req.done)
		req.done = nil
		if !lead {
			return
		}
	} else {
		c.busy = true
		c.mu.Unlock()
		// River starts the jobs of one fetch together: let those already
		// runnable join this round trip. A yield, not a wait.
		runtime.Gosched()
	}
	// This request heads the queue: take it and those behind it.
	c.mu.Lock()
	n := min(len(c.queue), c.max)
	batch := make([]*jobReq, n)
	copy(batch, c.queue)
	clear(c.queue[:n])
	c.queue = c.queue[n:]
	c.mu.Unlock()
	c.round(batch)
}

// round runs one round trip for batch, whose first request is the caller's,
// hands the lead to the head of the queue (or ends the busy spell), and
// answers the other requests of batch.
func (c *coalescer) round(batch []*jobReq) {
	c.do(batch)
	c.mu.Lock()
	if len(c.queue) > 0 {
		c.queue[0].done <- true
	} else {
		c.busy = false
	}
	c.mu.Unlock()
	for _, r := range batch[1:] {
		r.done <- false
	}
}

// batcher claims and finishes the jobs of one guard in batches.
type batcher struct {
	g        *core.Guard
	claims   coalescer
	finishes coalescer
}

func newBatcher(g *core.Guard, max int) *batcher {
	b := &batcher{g: g}
	b.claims = coalescer{max: max, do: b.claimBatch}
	b.finishes = coalescer{max: max, do: b.finishBatch}
	return b
}

func (b *batcher) claimBatch(reqs []*jobReq) {
	if len(reqs) == 1 {
		reqs[0].claim = b.g.Claim(reqs[0].ctx, reqs[0].job)[0]
		return
	}
	jobs := make([]core.Job, len(reqs))
	for i, r := range reqs {
		jobs[i] = r.job
	}
	// The leader's values, but not its cancellation, which must not fail
	// the others' claims.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(reqs[0].ctx), b.g.Config().StoreTimeout)
	claims := b.g.Claim(ctx, jobs...)
	cancel()
	for i, r := range reqs {
		r.claim = claims[i]
	}
}

func (b *batcher) finishBatch(reqs []*jobReq) {
	claims := make([]*core.Claim, len(reqs))
	for i, r := range reqs {
		claims[i] = r.claim
	}
	// Finish reports LeaseLost and Unrecorded to the guard's observer, log
	// and metrics; the job ran either way, so River completes it.
	b.g.Finish(reqs[0].ctx, claims...)
}
