package core

import (
	"context"
	"fmt"
	"time"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/internal/groupcommit"
	"github.com/jobonce/jobonce/internal/heartbeat"
	"github.com/jobonce/jobonce/internal/storecall"
	"github.com/jobonce/jobonce/internal/storedkey"
)

// Claim is one delivery claimed by Guard.Claim, for batch consumers
// (docs/semantics.md). A Claim is used by one goroutine at a time.
type Claim struct {
	// g is the Guard that made the claim: the claim reads its fields (its
	// store, observer and configuration) and calls none of its methods.
	g     *Guard
	job   Job
	key   string // stored key
	fp    string // the fingerprint as stored (see storedkey.Fingerprint)
	token driver.Token
	state claimState
	reply driver.ClaimReply // the store's answer (claimAnswered)
	// err is why the claim failed (claimFailed, claimOutage,
	// claimCanceled), or, once Work has begun, why it ran no job.
	err error
	hb  *heartbeat.Heartbeat // keeps a held claim alive until its marker is written
	// held is the claim's attribute set in jobonce.claims.held while it is
	// counted there: from its job's start until its heartbeat stops.
	held *attrOpts
	// stale: the claim found the key held by a claim its holder had
	// stopped renewing, or took it over (see noteRunning); lapse is when the
	// running claim it last found lapses unless renewed.
	stale bool
	lapse time.Time

	started   time.Time     // when the claim request was sent; the lease runs from here
	waited    time.Duration // how long the claim waited for a running copy (Job.WaitUntil)
	lag       time.Duration // a duplicate's lag behind its first copy's done marker
	wouldSkip Outcome       // shadow mode: the outcome enforcement would give this delivery
	final     Outcome       // the final outcome (claimFinished)
	value     []byte
	unstored  error // value is too large to store with the marker (ErrResultTooLarge)
	ran       time.Duration
}

// claimState is where a Claim is in its life. Guard.Claim leaves it in one
// of the first five states, the claim's answer; Work moves it to
// claimWorking (a claim runs its job once), then to claimPending or
// claimFinished; Finish moves a pending claim to claimFinished. The states
// from claimWorking on come last, in this order.
type claimState uint8

const (
	// claimNew: no claim was sent, as for an unguarded job (Job.Unguarded).
	claimNew claimState = iota
	// claimAnswered: the store answered; reply holds its answer.
	claimAnswered
	// claimFailed: err holds why the claim failed: an invalid key, or a
	// store failure under which the Guard fails closed.
	claimFailed
	// claimOutage: err says the store could not be reached (see
	// unreachable), the only failure under which the Guard fails open.
	claimOutage
	// claimCanceled: the caller's context ended before the claim was
	// answered (or while it was held, which released it); err wraps
	// ctx.Err().
	claimCanceled
	// claimWorking: Work was called: it decides on the answer, waits for a
	// running copy or runs the job.
	claimWorking
	// claimPending: the job succeeded under the claim, which the heartbeat
	// keeps alive; its done marker awaits Finish.
	claimPending
	// claimFinished: final holds the final outcome.
	claimFinished
)

// Claim claims jobs, in one round trip on a driver.BatchStore, and returns
// one Claim per job, in order. Each Claim's Work reports its errors.
func (g *Guard) Claim(ctx context.Context, jobs ...Job) []*Claim {
	claims := make([]*Claim, len(jobs))
	if g.store.Batcher == nil || len(jobs) < 2 {
		for i, job := range jobs {
			claims[i] = new(Claim)
			g.claimOne(ctx, claims[i], job)
		}
		return claims
	}
	reqs := make([]driver.ClaimRequest, 0, len(jobs))
	idx := make([]int, 0, len(jobs))
	now := time.Now()
	for i, job := range jobs {
		c := &Claim{g: g, job: job, fp: storedkey.Fingerprint(job.Fingerprint), started: now}
		claims[i] = c
		if !c.prepare(ctx) {
			continue
		}
		reqs = append(reqs, c.claimRequest())
		idx = append(idx, i)
	}
	if len(reqs) == 0 {
		return claims
	}
	sctx, cancel := context.WithTimeout(ctx, g.cfg.StoreTimeout)
	defer cancel()
	replies, errs := g.store.ClaimBatch(sctx, reqs)
	// The releases of claims granted after ctx ended share what is left of
	// the batch's StoreTimeout, so the call stays within one store call's
	// bound; a claim not released in time lapses with its lease.
	rctx, rcancel := context.WithDeadline(storecall.Detach(ctx), now.Add(g.cfg.StoreTimeout))
	defer rcancel()
	for j, i := range idx {
		c := claims[i]
		c.reply, c.err = replies[j], errs[j]
		if ctx.Err() != nil && c.err == nil && c.reply.State == driver.StateClaimed {
			g.store.ReleaseWithin(rctx, c.key, c.token)
			c.reply = driver.ClaimReply{}
		}
		c.settle(ctx)
	}
	return claims
}

// claimOne claims job into c, through the group commit when there is one.
func (g *Guard) claimOne(ctx context.Context, c *Claim, job Job) {
	*c = Claim{g: g, job: job, fp: storedkey.Fingerprint(job.Fingerprint)}
	if !c.prepare(ctx) {
		return
	}
	c.started = time.Now()
	if g.groupCommit == nil {
		sctx, cancel := context.WithTimeout(ctx, g.cfg.StoreTimeout)
		c.reply, c.err = g.store.Claim(sctx, c.claimRequest())
		cancel()
	} else {
		c.reply, c.err = g.groupCommit.Do(ctx, groupcommit.Claim(c.claimRequest()))
	}
	c.settle(ctx)
}

// settle settles the claim's answer under the caller's context: a claim
// stopped by it is canceled (see stopped); otherwise a store error is
// classified, once, as an outage or not.
func (c *Claim) settle(ctx context.Context) {
	switch {
	case c.stopped(ctx):
		c.state = claimCanceled
	case c.err == nil:
		c.state = claimAnswered
	case unreachable(ctx, c.err):
		c.state = claimOutage
	default:
		c.state = claimFailed
	}
}

// prepare derives the claim's stored key and token. It reports false when
// no claim is to be sent: the job is unguarded, its key is invalid, or ctx
// has ended.
func (c *Claim) prepare(ctx context.Context) bool {
	if c.job.Unguarded {
		return false
	}
	key, ok := storedkey.Key(c.g.cfg.KeyPrefix, c.job.Key, c.g.cfg.PlainKeys)
	if !ok {
		c.err, c.state = errEmptyKey, claimFailed
		return false
	}
	c.key = key
	if c.stopped(ctx) {
		c.state = claimCanceled
		return false
	}
	c.token = driver.NewToken()
	return true
}

// stopped reports whether the caller's context has ended. If so, the
// claim's store error (which the cancellation may have caused) is replaced
// by the context's, and a claim the store granted is released, since its
// job would only run with a cancelled context; the caller settles the
// claim as canceled. A definite answer (running, done) is kept.
func (c *Claim) stopped(ctx context.Context) bool {
	done := storecall.Ended(ctx)
	if done == nil {
		return false
	}
	if c.err == nil && c.reply.State != driver.StateClaimed && c.reply.State != 0 {
		return false
	}
	if c.err == nil && c.reply.State == driver.StateClaimed {
		c.release(ctx)
	}
	c.reply = driver.ClaimReply{}
	c.err = fmt.Errorf("jobonce: claim stopped by the caller's context: %w", done)
	return true
}

// claimRequest returns the request that claims the claim's key.
func (c *Claim) claimRequest() driver.ClaimRequest {
	return driver.ClaimRequest{Key: c.key, Token: c.token, Fingerprint: c.fp, Lease: c.g.cfg.Lease}
}

// report hands one outcome of the claim's job to the Guard's observer, log
// and metrics.
func (c *Claim) report(ctx context.Context, out Outcome, err error, ran time.Duration) {
	if out == Ran && err == nil {
		err = c.unstored
	}
	e := c.job.event(out, err)
	e.Duration, e.WouldSkip, e.Waited = ran, c.wouldSkip, c.waited
	if out == Duplicate || c.wouldSkip == Duplicate {
		e.Lag = c.lag
	}
	if c.stale {
		c.g.obs.recordStale(ctx, out, c.job.Source, c.job.Kind)
	}
	c.g.obs.observe(ctx, e, c.job.skipHint())
}

// stopHeartbeat stops the claim's heartbeat, once (a stopped heartbeat may
// already serve another job), and with it counts the claim no longer held.
func (c *Claim) stopHeartbeat(ctx context.Context) {
	c.hb.Stop()
	c.hb = nil
	if c.held != nil {
		c.g.obs.unhold(ctx, c.held)
		c.held = nil
	}
}

// decline reports outcome out and error err for a job that does not run,
// and returns them.
func (c *Claim) decline(ctx context.Context, out Outcome, err error) (Result, error) {
	c.report(ctx, out, err, 0)
	return Result{Outcome: out}, err
}

// release releases the claim so a retry can run at once (see
// storecall.Store.Release).
func (c *Claim) release(ctx context.Context) {
	c.g.store.Release(ctx, c.key, c.token)
}

// decide decides the claim's answer (see decide).
func (c *Claim) decide() (Outcome, error) {
	return decide(&c.g.cfg, c.g.obs, c.job, c.fp, c.reply)
}

// decide turns a store's reply to a claim, or to a transactional record,
// into an outcome: 0 when the key is now this caller's (claimed, or
// recorded in its transaction), else the final outcome (Duplicate, Running,
// Conflict, Unavailable) and its error. fp is the caller's fingerprint as
// stored. It is the one place these outcomes are decided.
func decide(cfg *Config, obs *observer, job Job, fp string, reply driver.ClaimReply) (Outcome, error) {
	switch reply.State {
	case driver.StateClaimed:
		return 0, nil
	case driver.StateDone, driver.StateRunning:
		if fp != "" && reply.Fingerprint != "" && fp != reply.Fingerprint {
			return Conflict, fmt.Errorf("%w: key %q is %s with fingerprint %q, this delivery has %q",
				ErrConflict, job.Key, reply.State, reply.Fingerprint, fp)
		}
		if reply.State == driver.StateDone {
			return Duplicate, nil
		}
		return Running, &RunningError{RetryAfter: retryAfter(cfg, obs, job, reply)}
	default:
		return Unavailable, fmt.Errorf("%w: store replied with unknown state %d", ErrStoreUnavailable, reply.State)
	}
}

// retryAfter is the retry hint of a copy that found its job running: until
// the running copy is expected to end (see observer.expectedEnd), or, once
// that has passed, as long again as the copy is overdue, so that a job
// running past its kind's usual time is asked after at growing intervals;
// else the running claim's remaining lease; within [MinRetryAfter,
// MaxRetryAfter].
func retryAfter(cfg *Config, obs *observer, job Job, reply driver.ClaimReply) time.Duration {
	d := reply.Remaining
	if end, known := obs.expectedEnd(job, reply.Fence); known {
		left := time.Until(end)
		d = min(d, max(left, -left))
	}
	return min(max(d, cfg.MinRetryAfter), cfg.MaxRetryAfter)
}

// waits reports whether the claim, answered, found its job running and,
// should the wait be worth it, may wait for it (see waitUntil): Work may
// then take that long.
func (c *Claim) waits() bool {
	return c.reply.State == driver.StateRunning && !c.g.cfg.Shadow &&
		c.job.WaitUntil.After(time.Now())
}

// A claim whose holder crashed, froze or lost the store holds its key
// until its lease lapses, and its holder reports nothing. Copies of the
// job can tell: the heartbeat renews a claim every third of its Lease, so
// a running claim with less than a third of its Lease left has not been
// renewed for two periods; and a copy that waits for a running claim and
// claims the key once that claim's lease has run out took it over. Such a
// copy is counted in jobonce.claims.stale. Both assume the holder's Lease
// is this Guard's.

// noteRunning notes the claim's answer, a key held by another claim (one
// with a fence, not a transaction): stale when it has under a third of
// Lease left, unless this Guard's heartbeat is off (its claims are never
// renewed), and when it lapses unless renewed.
func (c *Claim) noteRunning() {
	r := c.reply
	if r.State != driver.StateRunning || r.Fence <= 0 || r.Remaining <= 0 {
		return
	}
	c.lapse = time.Now().Add(r.Remaining)
	if r.Remaining < c.g.cfg.Lease/3 && !c.g.cfg.DisableHeartbeat {
		c.stale = true
	}
}

// noteTakeover notes that a claim that waited for a running claim now
// holds the key: stale when the running claim's lease had run out, as it
// was last read, rather than being released.
func (c *Claim) noteTakeover() {
	if !c.lapse.IsZero() && !time.Now().Before(c.lapse) {
		c.stale = true
	}
}
