package core

import (
	"context"
	"fmt"
	"time"

	"github.com/jobonce/jobonce/core/driver"
)

// The Guard calls its store through these methods: a store method that
// panics fails its call with an error (errStorePanicked) rather than taking
// the job's goroutine, or the heartbeat's timer, down with it.

func storePanic(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%w: %v", errStorePanicked, r)
	}
}

func (g *Guard) storeClaim(ctx context.Context, req driver.ClaimRequest) (reply driver.ClaimReply, err error) {
	defer storePanic(&err)
	return g.store.Claim(ctx, req)
}

func (g *Guard) storeAwait(ctx context.Context, req driver.ClaimRequest) (reply driver.ClaimReply, err error) {
	defer storePanic(&err)
	return g.notifier.Await(ctx, req)
}

func (g *Guard) storeExtend(ctx context.Context, key string, token driver.Token, lease time.Duration) (err error) {
	defer storePanic(&err)
	return g.store.Extend(ctx, key, token, lease)
}

func (g *Guard) storeComplete(ctx context.Context, req driver.CompleteRequest) (err error) {
	defer storePanic(&err)
	return g.store.Complete(ctx, req)
}

func (g *Guard) storeRelease(ctx context.Context, key string, token driver.Token) (err error) {
	defer storePanic(&err)
	return g.store.Release(ctx, key, token)
}

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
