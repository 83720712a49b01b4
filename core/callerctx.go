package core

import (
	"context"
	"time"
)

// detach returns ctx without its cancellation, for store calls that must
// run even once the caller has stopped (done markers, releases): ctx itself
// when it cannot be cancelled, saving an allocation.
func detach(ctx context.Context) context.Context {
	if ctx.Done() == nil {
		return ctx
	}
	return context.WithoutCancel(ctx)
}

// ended returns ctx.Err(), or context.DeadlineExceeded once ctx's deadline
// has passed by the clock though its timer has not fired yet. A store
// client that sets its socket's deadline from ctx (go-redis with
// ContextTimeoutEnabled) can fail a call with an i/o timeout an instant
// before ctx itself reports its end: that failure is the caller's
// deadline, not an outage, and must not run the job unguarded.
func ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}
