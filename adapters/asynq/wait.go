package asynqonce

import (
	"context"
	"errors"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobonce/jobonce/core"
)

// wait keeps a copy that found its job running (or, with no retries left,
// found the store unreachable) in its worker slot, polling the Guard, until
// the job is done (a duplicate, acknowledged), the claim is free (this copy
// runs it), or the wait ends. The wait ends after Config.WaitRunning, or for
// a copy with no retries left, just before the task's deadline: Asynq
// archives a failing task whose retries are used up without asking
// IsFailure, so returning early would archive a job that another copy is
// still running. A copy with retries left returns the store error at once.
// When ctx ends first, the outcome is core.Canceled and the error matches
// ctx.Err().
func (m *middleware) wait(ctx context.Context, job core.Job, fn core.RunFunc, res core.Result, err error) (core.Result, error) {
	exhausted := retriesExhausted(ctx)
	var until time.Time // zero: no end but ctx
	deadline, hasDeadline := ctx.Deadline()
	switch {
	case exhausted:
		if hasDeadline {
			until = deadline.Add(-deadlineMargin)
		}
	case m.cfg.WaitRunning > 0 && errors.Is(err, core.ErrRunning):
		until = time.Now().Add(m.cfg.WaitRunning)
		if hasDeadline {
			until = minTime(until, deadline.Add(-deadlineMargin))
		}
	default:
		return res, err
	}

	pause := min(firstPoll, m.cfg.PollInterval)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		d := pause
		if hint, ok := core.RetryAfter(err); ok {
			d = min(d, hint)
		}
		if !until.IsZero() {
			d = min(d, time.Until(until))
			if d <= 0 {
				return res, err
			}
		}
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-ctx.Done():
			return m.stopped(ctx, job, fn)
		case <-timer.C:
		}
		res, err = m.g.Run(ctx, job, fn)
		if err == nil || !(errors.Is(err, core.ErrRunning) || exhausted && errors.Is(err, core.ErrStoreUnavailable)) {
			return res, err
		}
		pause = min(pause*2, m.cfg.PollInterval)
	}
}

// stopped ends a wait whose context ended: the copy did not run, and this is
// neither the running copy's doing nor the store's. The Guard, asked once
// more under the ended context, claims nothing and reports core.Canceled
// with the context's error.
func (m *middleware) stopped(ctx context.Context, job core.Job, fn core.RunFunc) (core.Result, error) {
	return m.g.Run(ctx, job, fn)
}

// retriesExhausted reports whether Asynq would archive the task if it failed
// now: its retry count has reached its maximum. Outside an Asynq server
// (no retry information in ctx) it reports false.
func retriesExhausted(ctx context.Context) bool {
	n, ok1 := asynq.GetRetryCount(ctx)
	limit, ok2 := asynq.GetMaxRetry(ctx)
	return ok1 && ok2 && n >= limit
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
