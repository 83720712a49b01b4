// Package groupcommit gathers concurrent store calls into shared round
// trips, as golang.org/x/sync/singleflight gathers calls of one key: Group
// is the primitive, ForStore the group commit of claims and done markers on
// a driver.BatchStore.
package groupcommit

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jobonce/jobonce/internal/storecall"
)

const (
	// maxBatch bounds how many calls share one store round trip.
	maxBatch = 128
	// RoundTrips is how many round trips a Guard's group commit has in
	// flight at most. Up to that many calls go at once, each alone; only
	// the calls that find every round trip in flight queue, and share the
	// next to end. Measured side by side on Redis (BenchmarkClaimComplete-
	// Interleaved), four in flight answered Guard.Do 1.2-1.5× as fast at 4
	// and 16 goroutines as one in flight (calls batched whenever a round
	// trip was in flight), and no slower at 64; one round trip that hangs
	// holds nobody up while another slot is free.
	RoundTrips = 4
)

// New returns a Group whose round trips for one call are one and for
// several send, each bounded by timeout, with up to slots round trips in
// flight (0 means 1).
func New[I, O any](one func(context.Context, I) (O, error), send func(context.Context, []I) ([]O, []error), timeout time.Duration, slots int) *Group[I, O] {
	return &Group[I, O]{one: one, send: send, timeout: timeout, slots: slots}
}

// Group gathers concurrent store calls into shared round trips: a
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
//     bound gets storecall.ErrStuck. A caller that left is never answered later.
//   - A round trip is bounded by timeout: alone, under the caller's context;
//     shared, under a context detached from any one caller's cancellation.
//   - Success is explicit: a round trip that panics or answers with the
//     wrong number of replies fails every call in it.
type Group[I, O any] struct {
	one     func(ctx context.Context, in I) (O, error)       // a round trip for one call
	send    func(ctx context.Context, in []I) ([]O, []error) // a round trip for several
	timeout time.Duration                                    // bounds a round trip
	slots   int                                              // round trips in flight at most; 0 means 1

	mu       sync.Mutex
	inFlight int              // round trips in flight (led or about to be)
	queue    []*pending[I, O] // calls waiting for the next round trip
}

// callState is where a pending call is, guarded by Group.mu.
type callState uint8

const (
	queued    callState = iota // in the queue
	leading                    // at the head of the queue, to send the next batch
	inRound                    // in a round trip led by another call
	answered                   // out and err are set
	abandoned                  // its caller left; nobody reads the answer
)

type pending[I, O any] struct {
	ctx   context.Context
	in    I
	out   O
	err   error
	state callState
	wake  chan struct{} // signalled once: leading or answered
}

// Do sends in, alone or with others, and returns its answer.
func (c *Group[I, O]) Do(ctx context.Context, in I) (O, error) {
	return c.DoWithin(ctx, in, c.timeout)
}

// DoWithin is Do for a call that, queued, waits at most patience for a
// round trip to take it, then makes its own.
func (c *Group[I, O]) DoWithin(ctx context.Context, in I, patience time.Duration) (O, error) {
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
				return zero, storecall.ErrStuck
			case waitMore:
				bound.Reset(next)
			}
			// woken: the signal is in p.wake
		}
	}
}

// verdict is what a queued call does when its timer fires (see check).
type verdict uint8

const (
	waitMore    verdict = iota // wait again, for the duration check returned
	woken                      // its wake signal is sent: read it
	goAlone                    // it left the queue: make a round trip of its own
	giveUpStuck                // it gave up on a round trip led by another call
)

// check decides, when p's timer fires, whether p leaves the queue (giveUp
// has passed), gives up on the round trip it is in (stuck has passed), or
// waits more.
func (c *Group[I, O]) check(p *pending[I, O], giveUp, stuck time.Time) (time.Duration, verdict) {
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
func (c *Group[I, O]) designate() {
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
func (c *Group[I, O]) leave(p *pending[I, O]) bool {
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
func (c *Group[I, O]) alone(ctx context.Context, in I) (out O, err error) {
	defer func() {
		if r := recover(); r != nil {
			var zero O
			out, err = zero, fmt.Errorf("%w: %v", storecall.ErrPanicked, r)
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
func (c *Group[I, O]) lead(batch []*pending[I, O]) {
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
func (c *Group[I, O]) leadAlone(p *pending[I, O]) {
	out, err := c.alone(p.ctx, p.in)
	c.mu.Lock()
	defer c.mu.Unlock()
	p.out, p.err, p.state = out, err, answered
	c.handOff()
}

// handOff ends a round trip: it makes the head of the queue lead the next
// round trip in its slot, or gives the slot up. c.mu is held.
func (c *Group[I, O]) handOff() {
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
func (c *Group[I, O]) take() []*pending[I, O] {
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
// calls. It returns one answer per call (see storecall.Batch).
func (c *Group[I, O]) roundTrip(batch []*pending[I, O]) ([]O, []error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(batch[0].ctx), c.timeout)
	defer cancel()
	in := make([]I, len(batch))
	for i, p := range batch {
		in[i] = p.in
	}
	return storecall.Batch(ctx, c.send, in)
}
