package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jobonce/jobonce/core/driver"
)

const (
	// maxBatch bounds how many calls share one store round trip.
	maxBatch = 128
	// groupRoundTrips is how many round trips a Guard's group commit has in
	// flight at most. Up to that many calls go at once, each alone; only
	// the calls that find every round trip in flight queue, and share the
	// next to end. Measured side by side on Redis (BenchmarkClaimComplete-
	// Interleaved), four in flight answered Guard.Do 1.2-1.5× as fast at 4
	// and 16 goroutines as one in flight (calls batched whenever a round
	// trip was in flight), and no slower at 64; one round trip that hangs
	// holds nobody up while another slot is free.
	groupRoundTrips = 4
)

var (
	// errStorePanicked fails every call of a round trip whose store call panicked.
	errStorePanicked = errors.New("jobonce: store call panicked")
	// errStoreStuck fails a call whose shared round trip outlived its bound
	// (a store that does not honour its context).
	errStoreStuck = errors.New("jobonce: store call did not return within StoreTimeout")
	// errBatchReplies fails every call of a batch the store answered with the
	// wrong number of replies.
	errBatchReplies = errors.New("jobonce: store answered a batch with the wrong number of replies")
)

// groupCommit gathers concurrent store calls into shared round trips: a
// call that finds a round trip slot free goes at once, alone;
// calls that arrive while every slot is in flight queue, and when a round
// trip ends, the head of the queue leads the next in its slot, for the
// calls queued by then. So a store under light load is called at once, and
// a busy one gets batches as large as the load makes them. No goroutine is
// started: callers take turns.
//
// What it guarantees whatever other callers (or the store) do:
//   - A call is answered within its own context and two timeouts: a queued
//     call whose context ends leaves the queue with its context's error; one
//     whose round trip has not started within timeout leaves the queue and
//     makes a round trip of its own; one whose shared round trip outlives the
//     bound gets errStoreStuck. A caller that left is never answered later.
//   - A round trip is bounded by timeout: alone, under the caller's context;
//     shared, under a context detached from any one caller's cancellation.
//   - Success is explicit: a round trip that panics or answers with the
//     wrong number of replies fails every call in it.
type groupCommit[I, O any] struct {
	one     func(ctx context.Context, in I) (O, error)       // a round trip for one call
	send    func(ctx context.Context, in []I) ([]O, []error) // a round trip for several
	timeout time.Duration                                    // bounds a round trip
	slots   int                                              // round trips in flight at most; 0 means 1

	mu       sync.Mutex
	inFlight int              // round trips in flight (led or about to be)
	queue    []*pending[I, O] // calls waiting for the next round trip
}

// A pending call's state, guarded by groupCommit.mu.
const (
	queued    = iota // in the queue
	leading          // at the head of the queue, to send the next batch
	inRound          // in a round trip led by another call
	answered         // out and err are set
	abandoned        // its caller left; nobody reads the answer
)

type pending[I, O any] struct {
	ctx   context.Context
	in    I
	out   O
	err   error
	state int
	wake  chan struct{} // signalled once: leading or answered
}

// do sends in, alone or with others, and returns its answer.
func (c *groupCommit[I, O]) do(ctx context.Context, in I) (O, error) {
	return c.doWithin(ctx, in, c.timeout)
}

// doWithin is do for a call that, queued, waits at most patience for a
// round trip to take it, then makes its own.
func (c *groupCommit[I, O]) doWithin(ctx context.Context, in I, patience time.Duration) (O, error) {
	c.mu.Lock()
	if c.inFlight < max(c.slots, 1) {
		c.inFlight++
		c.mu.Unlock()
		out, err := c.alone(ctx, in)
		c.mu.Lock()
		c.handOff()
		c.mu.Unlock()
		return out, err
	}
	p := &pending[I, O]{ctx: ctx, in: in, wake: make(chan struct{}, 1)}
	c.queue = append(c.queue, p)
	c.mu.Unlock()
	now := time.Now()
	giveUp := now.Add(min(patience, c.timeout)) // then leave the queue
	stuck := giveUp.Add(c.timeout)              // then give up on a round trip led by another

	bound := newBound(giveUp.Sub(now))
	defer putBound(bound)
	done := ctx.Done()
	for {
		select {
		case <-p.wake:
			if p.state == leading { // set before the signal, read after it
				c.lead(c.take())
			}
			return p.out, p.err
		case <-done:
			if c.leave(p) {
				var zero O
				return zero, ctx.Err()
			}
			done = nil // in a round trip: its answer comes within its bound
		case <-bound.C:
			switch next, act := c.check(p, giveUp, stuck); act {
			case goAlone:
				return c.alone(ctx, in)
			case giveUpStuck:
				var zero O
				return zero, errStoreStuck
			case waitMore:
				bound.Reset(next)
			}
			// woken: the signal is in p.wake
		}
	}
}

// What a queued call does when its timer fires (see check).
const (
	waitMore    = iota // wait again, for the duration check returned
	woken              // its wake signal is sent: read it
	goAlone            // it left the queue: make a round trip of its own
	giveUpStuck        // it gave up on a round trip led by another call
)

// check decides, when p's timer fires, whether p leaves the queue (giveUp
// has passed), gives up on the round trip it is in (stuck has passed), or
// waits more.
func (c *groupCommit[I, O]) check(p *pending[I, O], giveUp, stuck time.Time) (time.Duration, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	switch p.state {
	case queued:
		if !now.Before(giveUp) {
			p.state = abandoned
			c.queue = slices.DeleteFunc(c.queue, func(q *pending[I, O]) bool { return q == p })
			return 0, goAlone
		}
		return max(giveUp.Sub(now), time.Microsecond), waitMore
	case inRound:
		if !now.Before(stuck) {
			p.state = abandoned
			return 0, giveUpStuck
		}
		return stuck.Sub(now), waitMore
	}
	return 0, woken
}

// designate makes the head of the queue lead a round trip in a slot already
// counted. c.mu is held.
func (c *groupCommit[I, O]) designate() {
	head := c.queue[0]
	head.state = leading
	head.wake <- struct{}{}
}

// bounds holds stopped timers for queued calls to wait with: a queued call
// needs one, and most never fire.
var bounds sync.Pool

func newBound(d time.Duration) *time.Timer {
	if t, ok := bounds.Get().(*time.Timer); ok {
		t.Reset(d) // a stopped timer's channel is empty once Reset (Go 1.23)
		return t
	}
	return time.NewTimer(d)
}

func putBound(t *time.Timer) {
	t.Stop()
	bounds.Put(t)
}

// leave takes a queued call out of the queue. It reports false when the call
// is no longer queued.
func (c *groupCommit[I, O]) leave(p *pending[I, O]) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.state != queued {
		return false
	}
	p.state = abandoned
	c.queue = slices.DeleteFunc(c.queue, func(q *pending[I, O]) bool { return q == p })
	return true
}

// alone makes a round trip for one call, under its context bounded by
// timeout. It never panics.
func (c *groupCommit[I, O]) alone(ctx context.Context, in I) (out O, err error) {
	defer func() {
		if r := recover(); r != nil {
			var zero O
			out, err = zero, fmt.Errorf("%w: %v", errStorePanicked, r)
		}
	}()
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > c.timeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	return c.one(ctx, in)
}

// lead sends batch, whose first call is the caller's, answers every call in
// it, and hands its turn to the head of the queue or gives it up.
func (c *groupCommit[I, O]) lead(batch []*pending[I, O]) {
	if len(batch) == 1 {
		c.leadAlone(batch[0])
		return
	}
	outs, errs := c.roundTrip(batch)
	c.mu.Lock()
	defer c.mu.Unlock()
	batch[0].out, batch[0].err, batch[0].state = outs[0], errs[0], answered
	for i, p := range batch[1:] {
		if p.state == abandoned {
			continue
		}
		p.out, p.err, p.state = outs[i+1], errs[i+1], answered
		p.wake <- struct{}{}
	}
	c.handOff()
}

// leadAlone is lead for a batch of the caller's call alone.
func (c *groupCommit[I, O]) leadAlone(p *pending[I, O]) {
	out, err := c.alone(p.ctx, p.in)
	c.mu.Lock()
	defer c.mu.Unlock()
	p.out, p.err, p.state = out, err, answered
	c.handOff()
}

// handOff ends a round trip: it makes the head of the queue lead the next
// round trip in its slot, or gives the slot up. c.mu is held.
func (c *groupCommit[I, O]) handOff() {
	if len(c.queue) == 0 || c.queue[0].state == leading {
		c.inFlight--
		return
	}
	// The head of the queue leads next; it takes its batch when it runs, so
	// the calls that arrive meanwhile (often the ones just answered, making
	// their next call) join it.
	c.designate()
}

// take removes the next batch from the queue: the leading call, at its
// head, and up to maxBatch-1 calls behind it.
func (c *groupCommit[I, O]) take() []*pending[I, O] {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := min(len(c.queue), maxBatch)
	batch := slices.Clone(c.queue[:n])
	clear(c.queue[:n])
	c.queue = c.queue[n:]
	for _, p := range batch[1:] {
		p.state = inRound
	}
	if len(c.queue) > 0 && c.inFlight < max(c.slots, 1) {
		// More calls than one batch takes, and a round trip to spare: the
		// next head leads one now rather than wait for this one.
		c.inFlight++
		c.designate()
	}
	return batch
}

// roundTrip sends a batch of several calls, bounded by timeout under the
// leader's values but not its cancellation, which must not fail the others'
// calls. It returns one answer per call (see sendBatch).
func (c *groupCommit[I, O]) roundTrip(batch []*pending[I, O]) ([]O, []error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(batch[0].ctx), c.timeout)
	defer cancel()
	in := make([]I, len(batch))
	for i, p := range batch {
		in[i] = p.in
	}
	return sendBatch(ctx, c.send, in)
}

// sendBatch calls send and returns one answer per request. It never panics:
// a send that panics, or answers with the wrong number of replies, fails
// every request, so no request can mistake a missing answer for success.
func sendBatch[I, O any](ctx context.Context, send func(context.Context, []I) ([]O, []error), in []I) (outs []O, errs []error) {
	defer func() {
		if r := recover(); r != nil {
			outs, errs = failAll[O](len(in), fmt.Errorf("%w: %v", errStorePanicked, r))
		}
	}()
	outs, errs = send(ctx, in)
	if len(outs) != len(in) || len(errs) != len(in) {
		return failAll[O](len(in), fmt.Errorf("%w: %d requests, %d replies, %d errors", errBatchReplies, len(in), len(outs), len(errs)))
	}
	return outs, errs
}

func failAll[O any](n int, err error) ([]O, []error) {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return make([]O, n), errs
}

// storeOp is one call of the group commit: a claim, or a done marker.
type storeOp struct {
	claim    driver.ClaimRequest
	complete driver.CompleteRequest
	isClaim  bool
}

// newGroupCommit returns the group commit of a Guard on a BatchStore: claims
// and done markers share its round trips.
func newGroupCommit(bs driver.BatchStore, timeout time.Duration) *groupCommit[storeOp, driver.ClaimReply] {
	return &groupCommit[storeOp, driver.ClaimReply]{timeout: timeout, slots: groupRoundTrips,
		one: func(ctx context.Context, op storeOp) (driver.ClaimReply, error) {
			if op.isClaim {
				return bs.Claim(ctx, op.claim)
			}
			return driver.ClaimReply{}, bs.Complete(ctx, op.complete)
		},
		send: func(ctx context.Context, ops []storeOp) ([]driver.ClaimReply, []error) {
			var claims []driver.ClaimRequest
			var completes []driver.CompleteRequest
			for _, op := range ops {
				if op.isClaim {
					claims = append(claims, op.claim)
				} else {
					completes = append(completes, op.complete)
				}
			}
			replies, claimErrs, completeErrs := bs.Batch(ctx, completes, claims)
			if len(replies) != len(claims) || len(claimErrs) != len(claims) || len(completeErrs) != len(completes) {
				return nil, nil // sendBatch fails every call
			}
			outs, errs := make([]driver.ClaimReply, len(ops)), make([]error, len(ops))
			var j, k int
			for i, op := range ops {
				if op.isClaim {
					outs[i], errs[i] = replies[j], claimErrs[j]
					j++
				} else {
					errs[i] = completeErrs[k]
					k++
				}
			}
			return outs, errs
		}}
}

// claimBatch claims reqs in one round trip of bs.
func claimBatch(bs driver.BatchStore) func(context.Context, []driver.ClaimRequest) ([]driver.ClaimReply, []error) {
	return func(ctx context.Context, reqs []driver.ClaimRequest) ([]driver.ClaimReply, []error) {
		replies, errs, completeErrs := bs.Batch(ctx, nil, reqs)
		if len(completeErrs) != 0 {
			return nil, nil // sendBatch fails every call
		}
		return replies, errs
	}
}

// completeBatch writes the done markers of reqs in one round trip of bs.
func completeBatch(bs driver.BatchStore) func(context.Context, []driver.CompleteRequest) ([]struct{}, []error) {
	return func(ctx context.Context, reqs []driver.CompleteRequest) ([]struct{}, []error) {
		replies, claimErrs, errs := bs.Batch(ctx, reqs, nil)
		if len(replies) != 0 || len(claimErrs) != 0 {
			return nil, nil // sendBatch fails every call
		}
		return make([]struct{}, len(reqs)), errs
	}
}
