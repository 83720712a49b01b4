package asynqonce

import (
	"context"
	"errors"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobonce/jobonce/core"
)

// waitUntil returns how long a copy that finds its job running waits for
// that copy's outcome (core.Job.WaitUntil): Config.WaitRunning from now,
// within the task's deadline; for a copy with no retries left, up to just
// before the deadline (see waitExhausted). Zero: no wait.
func (m *middleware) waitUntil(ctx context.Context, exhausted bool) time.Time {
	deadline, hasDeadline := ctx.Deadline()
	switch {
	case exhausted && hasDeadline:
		return deadline.Add(-deadlineMargin)
	case m.cfg.WaitRunning < 0:
		return time.Time{}
	}
	until := time.Now().Add(m.cfg.WaitRunning)
	if hasDeadline {
		until = minTime(until, deadline.Add(-deadlineMargin))
	}
	return until
}

// waitExhausted keeps a copy with no retries left that found its job
// running (or the store unreachable) in its worker slot until the job is
// done (a duplicate, acknowledged), the claim is free (this copy runs it),
// or just before the task's deadline: Asynq archives a failing task whose
// retries are used up without asking IsFailure, so returning early would
// archive a job that another copy is still running. The Guard waits for the
// running copy's outcome through its completion signal; when it comes back
// before the deadline (the store failed, or the running copy is not
// expected to finish by then), the copy asks again after a pause that
// starts at 10ms and doubles up to Config.PollInterval, never beyond the
// running claim's RetryAfter hint. When ctx ends first, the outcome is
// core.Canceled and the error matches ctx.Err().
func (m *middleware) waitExhausted(ctx context.Context, job core.Job, fn core.RunFunc, res core.Result, err error) (core.Result, error) {
	until := job.WaitUntil
	pause := min(firstPoll, m.cfg.PollInterval)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for errors.Is(err, core.ErrRunning) || errors.Is(err, core.ErrStoreUnavailable) {
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
			// Asked once more under the ended context, the Guard claims
			// nothing and reports core.Canceled with the context's error.
			return m.g.Run(ctx, job, fn)
		case <-timer.C:
		}
		res, err = m.g.Run(ctx, job, fn)
		pause = min(pause*2, m.cfg.PollInterval)
	}
	return res, err
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
