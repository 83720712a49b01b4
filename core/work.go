package core

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/internal/groupcommit"
	"github.com/jobonce/jobonce/internal/heartbeat"
	"github.com/jobonce/jobonce/internal/jobctx"
	"github.com/jobonce/jobonce/internal/storecall"
)

// Runs reports whether Work may call the job's function or wait. When it is
// false, Work settles the claim at once and calls nothing.
func (c *Claim) Runs() bool {
	switch {
	case c == nil || c.g == nil || c.state >= claimWorking:
		return false
	case c.job.Unguarded:
		return true
	case c.g.cfg.Shadow:
		return c.state != claimCanceled // shadow mode runs every delivery
	case c.state == claimAnswered:
		return c.reply.State == driver.StateClaimed || c.waits()
	default:
		return c.failsOpen(c.state)
	}
}

// failsOpen reports whether a claim whose answer is answer failed with a
// store failure under which the Guard runs the job unguarded: with
// FailOpen, a store that could not be reached (see unreachable), never an
// answer it gave.
func (c *Claim) failsOpen(answer claimState) bool {
	return c.g.cfg.FailOpen && answer == claimOutage
}

// Work runs fn if the claim allows it, and reports the outcome as Guard.Run
// does. A Ran from Work leaves the claim pending: pass it to Guard.Finish,
// on every path. A second Work on a claim is Rejected.
func (c *Claim) Work(ctx context.Context, fn RunFunc) (Result, error) {
	if c == nil {
		return Result{Outcome: Rejected}, errors.New("jobonce: core: Claim.Work: the Claim is nil")
	}
	res, toMark, err := c.work(ctx, fn, "Claim.Work")
	switch {
	case toMark:
		c.state = claimPending
		return Result{Outcome: Ran, Value: c.value}, nil
	case c.state == claimWorking: // this call settled it, not an earlier one
		c.state, c.final = claimFinished, res.Outcome
	}
	return res, err
}

// run is Work followed by Finish, for one claim: Guard.Run, or Guard.Do
// (caller names which, in errors).
func (c *Claim) run(ctx context.Context, fn RunFunc, caller string) (Result, error) {
	res, toMark, err := c.work(ctx, fn, caller)
	if !toMark {
		return res, err
	}
	out, cause := c.finish(ctx)
	c.report(ctx, out, cause, c.ran)
	return Result{Outcome: out, Value: c.value}, nil
}

// work runs fn when the claim holds the key, and reports the final outcome,
// or toMark: fn succeeded under the claim, whose done marker is still to be
// written. caller names the exported function, in errors.
func (c *Claim) work(ctx context.Context, fn RunFunc, caller string) (res Result, toMark bool, err error) {
	answer, err := c.begin(ctx, fn, caller)
	if err != nil {
		return Result{Outcome: Rejected}, false, err
	}
	c.g.waiting.active.Add(1)
	defer c.g.waiting.active.Add(-1)
	if c.job.Unguarded {
		res, err = c.runUnguarded(ctx, fn, nil)
		return res, false, err
	}
	switch answer {
	case claimFailed, claimOutage, claimCanceled:
		res, err = c.failed(ctx, fn, answer)
		return res, false, err
	}
	return c.answered(ctx, fn)
}

// begin begins the claim's one Work: it marks the claim working and
// returns its answer, the state Guard.Claim left it in. It returns an
// error (the outcome is Rejected) for a Claim of no Guard, for one Work
// was called on already, and for a nil fn, releasing the claim.
func (c *Claim) begin(ctx context.Context, fn RunFunc, caller string) (claimState, error) {
	if c.g == nil {
		return 0, fmt.Errorf("jobonce: core: %s: the Claim does not come from Guard.Claim", caller)
	}
	if c.state >= claimWorking {
		err := fmt.Errorf("jobonce: core: %s: the claim was used by Work already", caller)
		c.report(ctx, Rejected, err, 0)
		return 0, err
	}
	answer := c.state
	c.state = claimWorking
	if fn == nil {
		err := fmt.Errorf("jobonce: core: %s: job function is nil", caller)
		c.report(ctx, Rejected, err, 0)
		if answer == claimAnswered && c.reply.State == driver.StateClaimed {
			c.release(ctx)
		}
		return 0, err
	}
	return answer, nil
}

// failed settles a claim whose answer is a failure: the caller's
// cancellation (Canceled), an invalid key (Rejected), a store that could
// not be reached, under FailOpen (fn runs unguarded, unless ctx has ended
// meanwhile or another copy of the key runs so in this Guard: Running), or
// any other store failure (Unavailable: fail closed).
func (c *Claim) failed(ctx context.Context, fn RunFunc, answer claimState) (Result, error) {
	switch {
	case answer == claimCanceled:
		return c.decline(ctx, Canceled, c.err)
	case errors.Is(c.err, ErrInvalidKey):
		return c.skip(ctx, fn, Rejected, c.err)
	case c.failsOpen(answer):
		if storecall.Ended(ctx) != nil {
			return c.cancel(ctx)
		}
		if _, held := c.g.failingOpen.LoadOrStore(c.job.Key, struct{}{}); held {
			// Another copy of the key runs unguarded in this Guard: the
			// copies keep their one-at-a-time, as under a claim.
			after := retryAfter(&c.g.cfg, c.g.obs, c.job, driver.ClaimReply{Remaining: c.g.cfg.Lease})
			return c.skip(ctx, fn, Running, &RunningError{RetryAfter: after})
		}
		defer c.g.failingOpen.Delete(c.job.Key)
		return c.runUnguarded(ctx, fn, c.err)
	}
	return c.skip(ctx, fn, Unavailable, fmt.Errorf("%w: %w", ErrStoreUnavailable, c.err))
}

// answered settles a claim the store answered: one that holds the key runs
// its job (see runHeld); for any other, the outcome decided (see decision)
// is final, and a Duplicate carries the stored result and its lag.
func (c *Claim) answered(ctx context.Context, fn RunFunc) (res Result, toMark bool, err error) {
	out, err := c.decision(ctx)
	if out == 0 {
		return c.runHeld(ctx, fn)
	}
	if out == Duplicate {
		c.lag = lagOf(c.reply.Remaining, c.g.cfg.Retention)
	}
	res, err = c.skip(ctx, fn, out, err)
	return res, false, err
}

// decision decides the store's answer (see decide): 0 when the claim
// holds the key, else the final outcome and its error. A claim that found
// its job running and may wait (see waits and waitUntil), when the Guard
// admits one more waiting copy (see waiting), first waits for the running
// copy, and the answer the wait ended with is decided; a wait
// that ended without one is Canceled (the caller's context ended) or
// Unavailable (the store failed: failing closed even under FailOpen, as
// the copy saw its job running). A claim never waits in shadow mode.
func (c *Claim) decision(ctx context.Context) (Outcome, error) {
	out, err := c.decide()
	if out == Running {
		c.noteRunning()
	}
	if out != Running || !c.waits() {
		return out, err
	}
	until := c.waitUntil()
	if until.IsZero() || !c.g.waiting.admit(c.key, c.job.HoldsWorker) {
		return out, err
	}
	answer := func() claimState {
		defer c.g.waiting.leave(c.key)
		waiting := c.g.obs.startWaiting(ctx, c.job.Source, c.job.Kind)
		defer c.g.obs.stopWaiting(ctx, waiting)
		return c.await(ctx, until)
	}()
	switch answer {
	case claimCanceled:
		return Canceled, c.err
	case claimFailed:
		return Unavailable, fmt.Errorf("%w: %w", ErrStoreUnavailable, c.err)
	}
	return c.decide()
}

// runHeld runs fn under the claim, which holds the key, unless the
// caller's context has ended (Canceled, releasing the claim) or the answer
// came late (see answeredLate). fn's error releases the claim (Failed); its
// success leaves the claim held, its done marker to be written (toMark).
func (c *Claim) runHeld(ctx context.Context, fn RunFunc) (res Result, toMark bool, err error) {
	if c.stopped(ctx) { // released
		res, err = c.decline(ctx, Canceled, c.err)
		return res, false, err
	}
	if after := time.Since(c.started); after >= c.g.cfg.Lease/2 {
		res, err = c.answeredLate(ctx, fn, after)
		return res, false, err
	}
	value, err := c.call(ctx, fn)
	if err != nil {
		c.release(ctx)
		c.report(ctx, Failed, err, c.ran)
		return Result{Outcome: Failed, Value: value}, false, err
	}
	c.value, c.unstored = value, c.checkResult(value)
	return Result{Outcome: Ran, Value: value}, true, nil
}

// answeredLate settles a claim whose answer came after, past half its
// lease since it was sent: the claim may lapse before the heartbeat can
// renew it, and another copy may then run alongside, so it is released and
// fails closed, as for an outage (Unavailable; Canceled if ctx ended
// meanwhile).
func (c *Claim) answeredLate(ctx context.Context, fn RunFunc, after time.Duration) (Result, error) {
	c.release(ctx)
	c.reply = driver.ClaimReply{} // released: stopped must not release it again
	if c.stopped(ctx) {
		return c.decline(ctx, Canceled, c.err)
	}
	err := fmt.Errorf("%w: the claim was answered %s after it was sent, past half its lease (%s)", ErrStoreUnavailable, after.Round(time.Millisecond), c.g.cfg.Lease)
	return c.skip(ctx, fn, Unavailable, err)
}

// skip reports outcome out and error err for a job that enforcement does
// not run; shadow mode runs it all the same (see runShadow). A Duplicate's
// Result carries the stored result.
func (c *Claim) skip(ctx context.Context, fn RunFunc, out Outcome, err error) (Result, error) {
	if c.g.cfg.Shadow {
		return c.runShadow(ctx, fn, out, err)
	}
	res, err := c.decline(ctx, out, err)
	if out == Duplicate {
		res.Value = c.reply.Result
	}
	return res, err
}

// call runs fn under a heartbeat. When fn succeeds, the heartbeat goes on
// (c.hb) until the done marker is written; otherwise it stops and the claim
// is released. A panic is reported as Failed and raised again.
func (c *Claim) call(ctx context.Context, fn RunFunc) (value []byte, err error) {
	g := c.g
	jobCtx, cancel := context.WithCancelCause(jobctx.With(ctx, g.cfg.KeyPrefix, c.job.Key, c.reply.Fence))
	c.hb = heartbeat.Start(jobCtx, g.heartbeat, c.key, c.token, c.started, cancel)
	c.held = g.obs.hold(ctx, c.job.Source, c.job.Kind)
	start := time.Now()
	finished := false
	defer func() {
		cancel(nil)
		c.ran = time.Since(start)
		if finished && err == nil {
			return
		}
		c.stopHeartbeat(ctx)
		if finished {
			return // fn's error: runHeld releases and reports it
		}
		r := recover()
		c.release(ctx)
		c.state, c.final = claimFinished, Failed
		c.report(ctx, Failed, fmt.Errorf("jobonce: job panicked: %v", r), c.ran)
		if r != nil {
			panic(r)
		}
	}()
	value, err = fn(jobCtx)
	finished = true
	return value, err
}

// checkResult returns an error matching ErrResultTooLarge, naming its size
// and the limit, when a job's result is larger than Config.MaxResultSize.
func (c *Claim) checkResult(result []byte) error {
	limit := c.g.cfg.MaxResultSize
	if len(result) <= limit {
		return nil
	}
	return fmt.Errorf("%w: the job's result is %d bytes, over Config.MaxResultSize (%d bytes); its done marker was written without it, so duplicates get no result",
		ErrResultTooLarge, len(result), limit)
}

// completeRequest returns the request that writes the claim's done marker,
// with the job's result unless it is too large to store.
func (c *Claim) completeRequest() driver.CompleteRequest {
	result := c.value
	if c.unstored != nil {
		result = nil
	}
	return driver.CompleteRequest{Key: c.key, Token: c.token, Fingerprint: c.fp, Result: result, Retention: c.g.cfg.Retention, Fence: c.reply.Fence}
}

// finish writes the done marker (see complete), then stops the heartbeat
// that kept the claim alive meanwhile.
func (c *Claim) finish(ctx context.Context) (Outcome, error) {
	defer c.stopHeartbeat(ctx)
	return c.complete(ctx)
}

// complete writes the done marker, through the group commit when there is
// one, retrying store failures on its own (storecall.Store.CompleteWithin); every attempt shares one
// StoreTimeout (a marker in a shared round trip that hangs may wait one
// more, as any call of the group commit). It runs even when ctx is
// cancelled: the effect happened.
func (c *Claim) complete(ctx context.Context) (Outcome, error) {
	g := c.g
	req := c.completeRequest()
	sctx, cancel := context.WithTimeout(storecall.Detach(ctx), g.cfg.StoreTimeout)
	defer cancel()
	var err error
	if g.groupCommit != nil {
		// Queued behind round trips that others' calls keep busy, a marker
		// waits half its time at most, then makes its own round trip.
		_, err = g.groupCommit.DoWithin(sctx, groupcommit.Complete(req), g.cfg.StoreTimeout/2)
		if err == nil || storecall.MarkerFinal(err) || sctx.Err() != nil {
			return completeOutcome(err), err
		}
	}
	err = g.store.CompleteWithin(sctx, req, err)
	return completeOutcome(err), err
}

// completeOutcome returns the outcome of a job that succeeded under its
// claim, whose done marker's write ended with err.
func completeOutcome(err error) Outcome {
	switch {
	case err == nil:
		return Ran
	case errors.Is(err, ErrLeaseLost):
		return LeaseLost
	default:
		return Unrecorded
	}
}
