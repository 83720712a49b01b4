package core

import (
	"context"
	"fmt"
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
// maxPoll.
const (
	firstCheck = time.Second
	firstPoll  = 10 * time.Millisecond
	maxPoll    = time.Second
)

// waits reports whether the claim, answered, found its job running and,
// should the wait be worth it, may wait for it (see waitUntil): Work may
// then take that long.
func (c *Claim) waits() bool {
	return c.reply.State == driver.StateRunning && !c.g.cfg.Shadow &&
		c.job.WaitUntil.After(time.Now())
}

// waitUntil returns when a claim that found its job running stops waiting
// for the running copy, or zero when it does not wait: Job.WaitUntil, unless
// the running copy is expected to finish after it (its claim's start, by
// its fence, plus the 90th percentile of the kind's latest runs in this
// Guard).
func (c *Claim) waitUntil() time.Time {
	until := c.job.WaitUntil
	now := time.Now()
	if !until.After(now) {
		return time.Time{}
	}
	p90, known := c.g.metrics.runsOf(c.job.Source, c.job.Kind).p90()
	if !known {
		return until
	}
	start := now
	if f := c.reply.Fence; f > 0 {
		if s := time.UnixMicro(f); s.Before(now) {
			start = s
		}
	}
	if start.Add(p90).After(until) {
		return time.Time{} // a long job: back to the caller's own "later"
	}
	return until
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
	w := g.signal.join(ctx, c.key)
	defer w.leave()
	next := firstCheck
	if !w.listening {
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
		case <-w.wake:
		case <-timer.C:
			next *= 2
			if !w.listening {
				next = min(next, maxPoll)
			}
		}
		c.reclaim(ctx)
		if c.err != nil {
			if g.stopped(ctx, c) {
				return claimCanceled
			}
			return claimFailed
		}
		if out, _ := g.decide(c.job, c.fp, c.reply); out != Running {
			return claimAnswered
		}
		left := time.Until(until)
		if left <= 0 {
			return claimAnswered
		}
		d := min(next, left)
		if w.listening && c.reply.Remaining > 0 {
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
	if g.notifier == nil {
		c.reply, c.err = g.storeClaim(sctx, c.claimRequest())
		return
	}
	c.reply, c.err = g.storeAwait(sctx, c.claimRequest())
}
