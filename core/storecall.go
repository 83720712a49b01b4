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

func (g *Guard) storeReady(ctx context.Context, store driver.ReadyStore) (err error) {
	defer storePanic(&err)
	return store.Ready(ctx)
}
