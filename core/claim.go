package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jobonce/jobonce/core/driver"
)

// Claim is one delivery claimed by Guard.Claim, for consumers that receive
// jobs in batches (a Kafka or NATS consumer, the SQS Poller): Guard.Claim
// claims a batch in one store round trip, Work runs each claimed job, and
// Guard.Finish records the done markers of the batch in one round trip.
// Guard.Run does the same for one job. A Claim is used by one goroutine at a
// time.
type Claim struct {
	g     *Guard
	job   Job
	key   string // stored key
	fp    string // the fingerprint as stored (see storedFingerprint)
	token driver.Token
	state claimState
	reply driver.ClaimReply // the store's answer (claimAnswered)
	// err is why the claim failed (claimFailed, claimOutage,
	// claimCanceled), or, once Work has begun, why it ran no job.
	err error
	hb  *heartbeat // keeps a held claim alive until its marker is written

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

// Claim claims jobs, in one store round trip when the store is a
// driver.BatchStore. It returns one Claim per job, in order; errors (an
// invalid key, a store failure, the caller's cancellation) are held in each
// Claim and reported by its Work. When one call holds copies of one key, the
// first holds it and the others find it running; a consumer that wants them
// answered as duplicates claims them after the first has finished, as the
// SQS Poller does.
func (g *Guard) Claim(ctx context.Context, jobs ...Job) []*Claim {
	claims := make([]*Claim, len(jobs))
	if g.batch == nil || len(jobs) < 2 {
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
		c := &Claim{g: g, job: job, fp: storedFingerprint(job.Fingerprint), started: now}
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
	replies, errs := sendBatch(sctx, claimBatch(g.batch), reqs)
	// The releases of claims granted after ctx ended share what is left of
	// the batch's StoreTimeout, so the call stays within one store call's
	// bound; a claim not released in time lapses with its lease.
	rctx, rcancel := context.WithDeadline(detach(ctx), now.Add(g.cfg.StoreTimeout))
	defer rcancel()
	for j, i := range idx {
		c := claims[i]
		c.reply, c.err = replies[j], errs[j]
		if ctx.Err() != nil && c.err == nil && c.reply.State == driver.StateClaimed {
			g.releaseWithin(rctx, c.key, c.token)
			c.reply = driver.ClaimReply{}
		}
		g.settle(ctx, c)
	}
	return claims
}

func (g *Guard) claimOne(ctx context.Context, c *Claim, job Job) {
	*c = Claim{g: g, job: job, fp: storedFingerprint(job.Fingerprint)}
	if !c.prepare(ctx) {
		return
	}
	c.started = time.Now()
	if g.groupCommit == nil {
		sctx, cancel := context.WithTimeout(ctx, g.cfg.StoreTimeout)
		c.reply, c.err = g.storeClaim(sctx, c.claimRequest())
		cancel()
	} else {
		c.reply, c.err = g.groupCommit.do(ctx, storeOp{claim: c.claimRequest(), isClaim: true})
	}
	g.settle(ctx, c)
}

// settle settles the claim's answer under the caller's context: a claim
// stopped by it is canceled (see stopped); otherwise a store error is
// classified, once, as an outage or not.
func (g *Guard) settle(ctx context.Context, c *Claim) {
	switch {
	case g.stopped(ctx, c):
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
	c.key, c.err = storedKey(c.g.cfg.KeyPrefix, c.job.Key, c.g.cfg.PlainKeys)
	if c.err != nil {
		c.state = claimFailed
		return false
	}
	if c.g.stopped(ctx, c) {
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
func (g *Guard) stopped(ctx context.Context, c *Claim) bool {
	done := ended(ctx)
	if done == nil {
		return false
	}
	if c.err == nil && c.reply.State != driver.StateClaimed && c.reply.State != 0 {
		return false
	}
	if c.err == nil && c.reply.State == driver.StateClaimed {
		g.release(ctx, c.key, c.token)
	}
	c.reply = driver.ClaimReply{}
	c.err = fmt.Errorf("jobonce: claim stopped by the caller's context: %w", done)
	return true
}

func (c *Claim) claimRequest() driver.ClaimRequest {
	return driver.ClaimRequest{Key: c.key, Token: c.token, Fingerprint: c.fp, Lease: c.g.cfg.Lease}
}

// Runs reports whether the claim's answer lets Work call the job's
// function: the claim holds the key, or the job runs without one
// (Job.Unguarded, the store could not be reached and the Guard fails open,
// or shadow mode, which runs every delivery), or it found its job running
// and may wait for that copy's outcome (Job.WaitUntil), after which it may
// run the job. A consumer can run the claims that run on goroutines of
// their own and settle the others at once with Work, which then calls no
// function and does not wait. Work may still not run a claim for which
// Runs is true, when the caller's context ended meanwhile (Canceled), the
// answer came past half the lease (Unavailable), or the wait ended with its
// job done (Duplicate) or still running (Running); it reports that
// outcome.
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

// Work runs fn if the claim holds the key (see Runs) and reports the
// outcome as Guard.Run does, with one difference: when fn succeeds under
// the claim, the claim stays held and Work returns outcome Ran and a nil
// error; the caller must then pass the claim to Guard.Finish, which records
// the done marker (for many claims in one round trip) and reports the final
// outcome. Until then the heartbeat keeps the claim alive, so the caller
// must call Finish for every claim Work left pending, on every path. Every
// other outcome is final. A claim's Work runs once; a second call is
// Rejected.
func (c *Claim) Work(ctx context.Context, fn RunFunc) (Result, error) {
	if c == nil {
		return Result{Outcome: Rejected}, errors.New("jobonce: core: Claim.Work: the Claim is nil")
	}
	res, toMark, err := c.work(ctx, fn, "Claim.Work")
	switch {
	case toMark:
		c.state = claimPending
		return Result{Outcome: Ran, Value: c.value}, nil
	case c.state == claimWorking: // not a claim Work had left already
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
	if c.job.Unguarded {
		res, err = c.g.runUnguarded(ctx, c, fn, nil)
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
			c.g.release(ctx, c.key, c.token)
		}
		return 0, err
	}
	return answer, nil
}

// failed settles a claim whose answer is a failure: the caller's
// cancellation (Canceled), an invalid key (Rejected), a store that could
// not be reached, under FailOpen (fn runs unguarded, unless ctx has ended
// meanwhile), or any other store failure (Unavailable: fail closed).
func (c *Claim) failed(ctx context.Context, fn RunFunc, answer claimState) (Result, error) {
	switch {
	case answer == claimCanceled:
		return c.decline(ctx, Canceled, c.err)
	case errors.Is(c.err, ErrInvalidKey):
		return c.skip(ctx, fn, Rejected, c.err)
	case c.failsOpen(answer):
		if ended(ctx) != nil {
			return c.cancel(ctx)
		}
		return c.g.runUnguarded(ctx, c, fn, c.err)
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

// decision decides the store's answer (see Guard.decide): 0 when the claim
// holds the key, else the final outcome and its error. A claim that found
// its job running and may wait (see waits and waitUntil) first waits for
// the running copy, and the answer the wait ended with is decided; a wait
// that ended without one is Canceled (the caller's context ended) or
// Unavailable (the store failed: failing closed even under FailOpen, as
// the copy saw its job running). A claim never waits in shadow mode.
func (c *Claim) decision(ctx context.Context) (Outcome, error) {
	out, err := c.g.decide(c.job, c.fp, c.reply)
	if out != Running || !c.waits() {
		return out, err
	}
	until := c.waitUntil()
	if until.IsZero() {
		return out, err
	}
	switch c.await(ctx, until) {
	case claimCanceled:
		return Canceled, c.err
	case claimFailed:
		return Unavailable, fmt.Errorf("%w: %w", ErrStoreUnavailable, c.err)
	}
	return c.g.decide(c.job, c.fp, c.reply)
}

// runHeld runs fn under the claim, which holds the key, unless the
// caller's context has ended (Canceled, releasing the claim) or the answer
// came late (see answeredLate). fn's error releases the claim (Failed); its
// success leaves the claim held, its done marker to be written (toMark).
func (c *Claim) runHeld(ctx context.Context, fn RunFunc) (res Result, toMark bool, err error) {
	g := c.g
	if g.stopped(ctx, c) { // released
		res, err = c.decline(ctx, Canceled, c.err)
		return res, false, err
	}
	if after := time.Since(c.started); after >= g.cfg.Lease/2 {
		res, err = c.answeredLate(ctx, fn, after)
		return res, false, err
	}
	value, err := c.call(ctx, fn)
	if err != nil {
		g.release(ctx, c.key, c.token)
		c.report(ctx, Failed, err, c.ran)
		return Result{Outcome: Failed, Value: value}, false, err
	}
	c.value, c.unstored = value, g.checkResult(value)
	return Result{Outcome: Ran, Value: value}, true, nil
}

// answeredLate settles a claim whose answer came after, past half its
// lease since it was sent: the claim may lapse before the heartbeat can
// renew it, and another copy may then run alongside, so it is released and
// fails closed, as for an outage (Unavailable; Canceled if ctx ended
// meanwhile).
func (c *Claim) answeredLate(ctx context.Context, fn RunFunc, after time.Duration) (Result, error) {
	g := c.g
	g.release(ctx, c.key, c.token)
	if g.stopped(ctx, c) {
		return c.decline(ctx, Canceled, c.err)
	}
	err := fmt.Errorf("%w: the claim was answered %s after it was sent, past half its lease (%s)", ErrStoreUnavailable, after.Round(time.Millisecond), g.cfg.Lease)
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

// decline reports outcome out and error err for a job that does not run,
// and returns them.
func (c *Claim) decline(ctx context.Context, out Outcome, err error) (Result, error) {
	c.report(ctx, out, err, 0)
	return Result{Outcome: out}, err
}

// call runs fn under a heartbeat. When fn succeeds, the heartbeat goes on
// (c.hb) until the done marker is written; otherwise it stops and the claim
// is released. A panic is reported as Failed and raised again.
func (c *Claim) call(ctx context.Context, fn RunFunc) (value []byte, err error) {
	g := c.g
	jobCtx, cancel := context.WithCancelCause(g.withJob(ctx, c.job, c.reply.Fence))
	c.hb = g.startHeartbeat(jobCtx, c, cancel)
	start := time.Now()
	finished := false
	defer func() {
		cancel(nil)
		c.ran = time.Since(start)
		if finished && err == nil {
			return
		}
		c.stopHeartbeat()
		if finished {
			return // fn's error: work releases and reports it
		}
		r := recover()
		g.release(ctx, c.key, c.token)
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

// runUnguarded runs fn without a claim: cause is the store error under
// which the Guard fails open, or nil for a job unguarded by configuration.
func (g *Guard) runUnguarded(ctx context.Context, c *Claim, fn RunFunc, cause error) (Result, error) {
	start := time.Now()
	finished := false
	defer func() {
		if !finished {
			r := recover()
			c.state, c.final = claimFinished, Failed
			c.report(ctx, Failed, fmt.Errorf("jobonce: job panicked: %v", r), time.Since(start))
			if r != nil {
				panic(r)
			}
		}
	}()
	value, err := fn(g.withJob(ctx, c.job, 0))
	finished = true
	c.ran = time.Since(start)
	if err != nil {
		c.report(ctx, Failed, err, c.ran)
		return Result{Outcome: Failed, Value: value}, err
	}
	c.report(ctx, Unguarded, cause, c.ran)
	return Result{Outcome: Unguarded, Value: value}, nil
}

// runShadow runs, in shadow mode, a delivery that enforcement would skip
// with outcome would (and error cause): without a claim, reported as
// Unguarded (or Failed) with Event.WouldSkip set.
func (c *Claim) runShadow(ctx context.Context, fn RunFunc, would Outcome, cause error) (Result, error) {
	if ended(ctx) != nil {
		return c.cancel(ctx)
	}
	c.wouldSkip = would
	if would == Duplicate || would == Running || would == Conflict {
		cause = nil // the store answered: this is no store failure
	}
	return c.g.runUnguarded(ctx, c, fn, cause)
}

// cancel reports that the caller's context ended before a job that holds
// no claim could run: Canceled, and nothing runs.
func (c *Claim) cancel(ctx context.Context) (Result, error) {
	c.err = fmt.Errorf("jobonce: job not run: stopped by the caller's context: %w", ended(ctx))
	return c.decline(ctx, Canceled, c.err)
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
	c.g.observe(ctx, e, c.job.DefaultKey)
}

// Finish records the done markers of claims whose Work left them pending,
// in one store round trip when the store is a driver.BatchStore, and
// returns each claim's final outcome, in order: Ran, LeaseLost or
// Unrecorded for a pending claim (each claim's heartbeat keeps it alive
// until its marker is written or the write failed). For a claim whose Work
// was final, Finish repeats that outcome; for a nil claim, or one Work was
// not called on, it reports Rejected, as for a claim of another Guard,
// which it leaves as it is (a pending one for its own Guard's Finish). A
// claim listed twice is finished once and reported at each place. Only the
// pending claims are observed.
func (g *Guard) Finish(ctx context.Context, claims ...*Claim) []Outcome {
	outs := make([]Outcome, len(claims))
	var pending []int
	var repeats [][2]int // [index, index of the claim's first entry]
	first := make(map[*Claim]int, len(claims))
	for i, c := range claims {
		if j, ok := first[c]; ok && c != nil {
			repeats = append(repeats, [2]int{i, j})
			continue
		}
		first[c] = i
		switch {
		case c == nil || c.state < claimWorking:
			outs[i] = Rejected
		case c.g != g:
			// Its marker belongs in its own Guard's store: left pending,
			// for that Guard's Finish.
			outs[i] = Rejected
			g.cfg.Logger.WarnContext(ctx, "jobonce: Finish was given a claim of another Guard; finish it with the Guard that claimed it",
				"key", c.job.Key)
		case c.state != claimPending:
			outs[i] = c.final
		default:
			c.state = claimFinished // final is set below, with the marker
			pending = append(pending, i)
		}
	}
	defer func() {
		for _, r := range repeats { // a claim listed twice is finished once
			outs[r[0]] = outs[r[1]]
		}
	}()
	if len(pending) == 1 {
		c := claims[pending[0]]
		out, cause := c.finish(ctx)
		outs[pending[0]], c.final = out, out
		c.report(ctx, out, cause, c.ran)
		return outs
	}
	// The markers' retries share one StoreTimeout, after the batch's own
	// round trip (if any), so Finish answers within two store calls' bound
	// however many claims it is given.
	errs := make([]error, len(pending))
	failed := pending
	firstErrs := make(map[int]error) // the batch's answer to a marker retried
	if g.batch != nil {
		reqs := make([]driver.CompleteRequest, len(pending))
		for j, i := range pending {
			reqs[j] = claims[i].completeRequest()
		}
		sctx, cancel := context.WithTimeout(detach(ctx), g.cfg.StoreTimeout)
		_, errs = sendBatch(sctx, completeBatch(g.batch), reqs)
		cancel()
		failed = nil
		for j, i := range pending {
			if errs[j] != nil && !markerFinal(errs[j]) {
				failed = append(failed, i)
				firstErrs[i] = errs[j]
			}
		}
	}
	// The retries run side by side, so a marker that hangs takes none of
	// the others' time.
	rctx, cancel := context.WithTimeout(detach(ctx), g.cfg.StoreTimeout)
	defer cancel()
	retriedErrs := make([]error, len(failed))
	var wg sync.WaitGroup
	for j, i := range failed {
		wg.Go(func() { _, retriedErrs[j] = g.retryCompleteWithin(rctx, claims[i].completeRequest(), firstErrs[i]) })
	}
	wg.Wait()
	retried := make(map[int]error, len(failed))
	for j, i := range failed {
		retried[i] = retriedErrs[j]
	}
	for j, i := range pending {
		c := claims[i]
		err, ok := retried[i]
		if !ok {
			err = errs[j]
		}
		outs[i], c.final = completeOutcome(err), completeOutcome(err)
		c.stopHeartbeat()
		c.report(ctx, outs[i], err, c.ran)
	}
	return outs
}

func (c *Claim) completeRequest() driver.CompleteRequest {
	result := c.value
	if c.unstored != nil {
		result = nil
	}
	return driver.CompleteRequest{Key: c.key, Token: c.token, Fingerprint: c.fp, Result: result, Retention: c.g.cfg.Retention, Fence: c.reply.Fence}
}

// checkResult returns an error matching ErrResultTooLarge, naming its size
// and the limit, when a job's result is larger than Config.MaxResultSize.
func (g *Guard) checkResult(result []byte) error {
	if len(result) <= g.cfg.MaxResultSize {
		return nil
	}
	return fmt.Errorf("%w: the job's result is %d bytes, over Config.MaxResultSize (%d bytes); its done marker was written without it, so duplicates get no result",
		ErrResultTooLarge, len(result), g.cfg.MaxResultSize)
}

// markerFinal reports whether a failed done marker's write is final, not to
// be tried again: the token lost the key. (A marker written but not
// acknowledged, ErrUnreplicated, is sent again, as any other failure: the
// store knows its own marker.)
func markerFinal(err error) bool { return errors.Is(err, ErrLeaseLost) }

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

// completeBackoff is the wait before each retry of a failed Complete; the
// last one repeats until the marker's StoreTimeout ends, so a marker
// outlasts a failover shorter than that.
var completeBackoff = [...]time.Duration{10 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond}

// finish writes the done marker (see complete), then stops the heartbeat
// that kept the claim alive meanwhile.
func (c *Claim) finish(ctx context.Context) (Outcome, error) {
	defer c.stopHeartbeat()
	return c.g.complete(ctx, c)
}

// complete writes the done marker, through the group commit when there is
// one, retrying store failures on its own; every attempt shares one
// StoreTimeout (a marker in a shared round trip that hangs may wait one
// more, as any call of the group commit). It runs even when ctx is
// cancelled: the effect happened.
func (g *Guard) complete(ctx context.Context, c *Claim) (Outcome, error) {
	req := c.completeRequest()
	sctx, cancel := context.WithTimeout(detach(ctx), g.cfg.StoreTimeout)
	defer cancel()
	if g.groupCommit != nil {
		// Queued behind round trips that others' calls keep busy, a marker
		// waits half its time at most, then makes its own round trip.
		_, err := g.groupCommit.doWithin(sctx, storeOp{complete: req}, g.cfg.StoreTimeout/2)
		if err == nil || markerFinal(err) || sctx.Err() != nil {
			return completeOutcome(err), err
		}
		return g.retryCompleteWithin(sctx, req, err)
	}
	return g.retryCompleteWithin(sctx, req, nil)
}

// retryCompleteWithin writes a done marker on its own, retrying store
// failures after completeBackoff until sctx, which the caller bounded, ends.
//
// prev is the error of an attempt made before, if any. Every attempt sends
// the same request: one that an earlier attempt wrote (its reply lost, or
// answered ErrUnreplicated) finds this claim's own marker, answered nil
// (and acknowledged anew), and one that finds another claim's marker, or
// none, is LeaseLost.
func (g *Guard) retryCompleteWithin(sctx context.Context, req driver.CompleteRequest, prev error) (Outcome, error) {
	for attempt := 0; ; attempt++ {
		if prev != nil || attempt > 0 {
			pause := time.NewTimer(completeBackoff[min(attempt, len(completeBackoff)-1)])
			select {
			case <-pause.C:
			case <-sctx.Done():
				pause.Stop()
				return completeOutcome(prev), prev
			}
		}
		err := g.storeComplete(sctx, req)
		if err == nil || markerFinal(err) || sctx.Err() != nil {
			return completeOutcome(err), err
		}
		prev = err
	}
}

// release deletes our claim so a retry can run at once. Failure is harmless:
// the claim expires with its lease.
func (g *Guard) release(ctx context.Context, key string, token driver.Token) {
	sctx, cancel := context.WithTimeout(detach(ctx), g.cfg.StoreTimeout)
	defer cancel()
	g.releaseWithin(sctx, key, token)
}

// releaseWithin is release under a context the caller bounded.
func (g *Guard) releaseWithin(ctx context.Context, key string, token driver.Token) {
	if err := g.storeRelease(ctx, key, token); err != nil && !errors.Is(err, ErrLeaseLost) {
		g.cfg.Logger.WarnContext(ctx, "jobonce: release failed; the claim expires with its lease",
			"key", key, "error", err)
	}
}

func (g *Guard) retryAfter(remaining time.Duration) time.Duration {
	return min(max(remaining, g.cfg.MinRetryAfter), g.cfg.MaxRetryAfter)
}
