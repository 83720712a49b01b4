package core

import (
	"context"
	"fmt"
	"time"

	"github.com/jobonce/jobonce/internal/jobctx"
	"github.com/jobonce/jobonce/internal/storecall"
)

// runUnguarded runs fn without a claim: cause is the store error under
// which the Guard fails open (or shadow mode runs a delivery enforcement
// would skip), or nil for a job unguarded by configuration. A run that
// FailOpen made is counted in jobonce.fail_open too, whatever its outcome.
func (c *Claim) runUnguarded(ctx context.Context, fn RunFunc, cause error) (Result, error) {
	start := time.Now()
	finished := false
	report := func(out Outcome, err error, ran time.Duration) {
		if cause != nil && c.wouldSkip == 0 {
			c.g.obs.recordFailOpen(ctx, out, c.job.Source, c.job.Kind)
		}
		c.report(ctx, out, err, ran)
	}
	defer func() {
		if !finished {
			r := recover()
			c.state, c.final = claimFinished, Failed
			report(Failed, fmt.Errorf("jobonce: job panicked: %v", r), time.Since(start))
			if r != nil {
				panic(r)
			}
		}
	}()
	value, err := fn(jobctx.With(ctx, c.g.cfg.KeyPrefix, c.job.Key, 0))
	finished = true
	c.ran = time.Since(start)
	if err != nil {
		report(Failed, err, c.ran)
		return Result{Outcome: Failed, Value: value}, err
	}
	report(Unguarded, cause, c.ran)
	return Result{Outcome: Unguarded, Value: value}, nil
}

// runShadow runs, in shadow mode, a delivery that enforcement would skip
// with outcome would (and error cause): without a claim, reported as
// Unguarded (or Failed) with Event.WouldSkip set.
func (c *Claim) runShadow(ctx context.Context, fn RunFunc, would Outcome, cause error) (Result, error) {
	if storecall.Ended(ctx) != nil {
		return c.cancel(ctx)
	}
	c.wouldSkip = would
	if would == Duplicate || would == Running || would == Conflict {
		cause = nil // the store answered: this is no store failure
	}
	return c.runUnguarded(ctx, fn, cause)
}

// cancel reports that the caller's context ended before a job that holds
// no claim could run: Canceled, and nothing runs.
func (c *Claim) cancel(ctx context.Context) (Result, error) {
	c.err = fmt.Errorf("jobonce: job not run: stopped by the caller's context: %w", storecall.Ended(ctx))
	return c.decline(ctx, Canceled, c.err)
}
