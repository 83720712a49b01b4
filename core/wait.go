package core

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobonce/jobonce/core/driver"
)

// A copy that finds its job running, with Job.WaitUntil set, waits for the
// running copy's outcome: it listens to the key through the Guard's
// completion signal, then reads the key again (claiming it, and marking it
// awaited, driver.Notifier.Await) each time it is woken: once listening has
// begun, and whenever the running claim ended. It reads again without a
// signal too, after firstCheck and twice as long each time after, and
// before the awaited mark lapses with the running claim's lease, so a lost
// signal costs only latency. On a store that does not notify, or whose
// listener could not be opened, it polls: after firstPoll, doubling up to
// maxPoll, so that it settles within maxPoll and a round trip of the running
// copy's end (a poll costs one claim: dynamostore's waiting copies poll).
const (
	firstCheck = time.Second
	firstPoll  = 10 * time.Millisecond
	maxPoll    = 200 * time.Millisecond
)

// waitUntil returns when a claim that found its job running stops waiting
// for the running copy, or zero when it does not wait: Job.WaitUntil,
// unless the running copy is expected to end after it (see expectedEnd).
func (c *Claim) waitUntil() time.Time {
	until := c.job.WaitUntil
	if !until.After(time.Now()) {
		return time.Time{}
	}
	if end, known := c.g.obs.expectedEnd(c.job, c.reply.Fence); known && end.After(until) {
		return time.Time{} // a long job: back to the caller's own "later"
	}
	return until
}

// waiting bounds the copies of a Guard that wait for a running copy at
// once, so that a key many copies find running never takes a worker pool:
// one copy of a key waits, and no more copies wait than a share
// (Config.WaitingShare) of the calls in progress; the others report
// Running at once, for their framework to bring back later. A copy whose
// caller holds its worker anyway (Job.HoldsWorker) waits regardless, and
// counts.
type waiting struct {
	share  float64
	active atomic.Int64 // calls in Claim.work

	mu    sync.Mutex
	keys  map[string]int // how many copies wait for each stored key
	count int
}

func newWaiting(share float64) *waiting {
	return &waiting{share: share, keys: make(map[string]int)}
}

// admit reports whether a copy may wait for key's running copy; if so, it
// must call leave when the wait ends.
func (w *waiting) admit(key string, holdsWorker bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !holdsWorker && (w.keys[key] > 0 || w.count >= max(1, int(float64(w.active.Load())*w.share))) {
		return false
	}
	w.keys[key]++
	w.count++
	return true
}

func (w *waiting) leave(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.keys[key]--; w.keys[key] == 0 {
		delete(w.keys, key)
	}
	w.count--
}

// await waits for the running copy's outcome until until, reading the key
// again (see the constants above) until the claim holds it, finds it done
// (or held with another fingerprint), or the wait ends, and then returns
// claimAnswered; it returns claimCanceled when ctx ends, and claimFailed
// when the store fails (c.err says why). A store failure ends the wait
// failing closed, never as an outage: the copy saw its job running, so
// FailOpen must not run it beside that copy.
func (c *Claim) await(ctx context.Context, until time.Time) claimState {
	g := c.g
	start := time.Now()
	defer func() { c.waited = time.Since(start) }()
	// The wait bounds how long the copy queues behind other copies'
	// Listener calls, as its context does: past it, the copy reads its key
	// once and is answered.
	jctx, jcancel := context.WithDeadline(ctx, until)
	w := g.signal.Join(jctx, c.key)
	jcancel()
	defer w.Leave()
	next := firstCheck
	if !w.Listening() {
		next = firstPoll
	}
	timer := time.NewTimer(min(next, time.Until(until)))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			c.reply = driver.ClaimReply{}
			c.err = fmt.Errorf("jobonce: wait for the running copy stopped by the caller's context: %w", ctx.Err())
			return claimCanceled
		case <-w.Wake():
		case <-timer.C:
			next *= 2
			if !w.Listening() {
				next = min(next, maxPoll)
			}
		}
		c.reclaim(ctx)
		if c.err != nil {
			if c.stopped(ctx) {
				// The read may have claimed the key (the running copy had
				// ended) though the caller's context cut its answer: a
				// claim nobody renews would hold the key for its lease.
				// The release is token-checked.
				c.release(ctx)
				return claimCanceled
			}
			return claimFailed
		}
		if out, _ := c.decide(); out != Running {
			if out == 0 {
				c.noteTakeover()
			}
			return claimAnswered
		}
		c.noteRunning()
		left := time.Until(until)
		if left <= 0 {
			return claimAnswered
		}
		d := min(next, left)
		if w.Listening() && c.reply.Remaining > 0 {
			d = min(d, c.reply.Remaining) // the awaited mark lapses with the lease
		}
		timer.Reset(d)
	}
}

// reclaim claims the key again for the claim, with a new token, through
// the store's Await when it notifies, so that a key still running is
// marked awaited in the same step.
func (c *Claim) reclaim(ctx context.Context) {
	g := c.g
	c.token = driver.NewToken()
	c.started = time.Now()
	sctx, cancel := context.WithTimeout(ctx, g.cfg.StoreTimeout)
	defer cancel()
	if g.store.Notifier == nil {
		c.reply, c.err = g.store.Claim(sctx, c.claimRequest())
		return
	}
	c.reply, c.err = g.store.Await(sctx, c.claimRequest())
}
