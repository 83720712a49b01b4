package core

import "context"

// Do runs fn at most once at a time for key and, after fn succeeded, never
// again while the done marker is retained.
//
//   - The key was free: fn runs with a context that is cancelled with cause
//     ErrLeaseLost if the claim is lost. fn's error (or panic) releases the
//     claim and comes back unchanged, with outcome Failed. Success records
//     the done marker: Ran (or LeaseLost/Unrecorded when it could not be
//     recorded; the error is nil all the same, since the effect happened).
//   - Another copy runs: outcome Running and a *RunningError (ErrRunning).
//   - Already done: outcome Duplicate and a nil error.
//   - The store is unreachable: outcome Unavailable and an error matching
//     ErrStoreUnavailable, or with FailOpen, fn runs unguarded (Unguarded).
//   - An empty key: outcome Rejected and an error matching ErrInvalidKey.
func (g *Guard) Do(ctx context.Context, key string, fn func(context.Context) error) (Outcome, error) {
	if fn == nil {
		res, err := g.run(ctx, Job{Key: key}, nil, "Guard.Do")
		return res.Outcome, err
	}
	res, err := g.run(ctx, Job{Key: key}, func(ctx context.Context) ([]byte, error) {
		return nil, fn(ctx)
	}, "Guard.Do")
	return res.Outcome, err
}

// Run is Do with a payload fingerprint and a stored result. A Duplicate's
// Result.Value is the result stored by the copy that ran. Different payloads
// under one key give Conflict and an error matching ErrConflict. A nil
// error means the delivery is handled (acknowledge it); any other outcome
// comes with an error.
func (g *Guard) Run(ctx context.Context, job Job, fn RunFunc) (Result, error) {
	return g.run(ctx, job, fn, "Guard.Run")
}

// run is Run; caller names the exported function, in errors.
func (g *Guard) run(ctx context.Context, job Job, fn RunFunc, caller string) (Result, error) {
	var c Claim
	if fn == nil {
		c = Claim{g: g, job: job} // rejected below without claiming
		return c.run(ctx, nil, caller)
	}
	g.claimOne(ctx, &c, job)
	return c.run(ctx, fn, caller)
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
