package watermillonce

import (
	"context"
	"time"

	"github.com/jobonce/jobonce/core"
)

// wait keeps a copy that found its job running in its handler, polling the
// Guard, until the job is done (a duplicate), the claim is free (this copy
// runs the job), or Config.WaitRunning has passed (the copy returns the
// Guard's core.RunningError). Pauses start at 10ms and double up to
// Config.PollInterval, never beyond the running claim's RetryAfter hint.
// When ctx ends first, the outcome is core.Canceled and the error matches
// ctx.Err().
func (m *middleware) wait(ctx context.Context, job core.Job, fn core.RunFunc, res core.Result, err error) (core.Result, error) {
	if m.cfg.WaitRunning < 0 {
		return res, err
	}
	until := time.Now().Add(m.cfg.WaitRunning)
	pause := min(firstPoll, m.cfg.PollInterval)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for res.Outcome == core.Running {
		d := min(pause, time.Until(until))
		if hint, ok := core.RetryAfter(err); ok {
			d = min(d, hint)
		}
		if d <= 0 {
			return res, err
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

// pause waits d, or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
