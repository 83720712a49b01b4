package storetest

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jobonce/jobonce/core/driver"
)

// errInjected is the error a Faulty store returns while it is down: one
// that cannot be reached.
var errInjected = fmt.Errorf("storetest: injected store failure: %w", driver.ErrUnreachable)

// Faulty wraps a real store and fails chosen operations on demand, to test
// what a Guard does when its store stops answering.
type faulty struct {
	driver.Store
	claimDown  atomic.Bool
	extendDown atomic.Bool
	finishDown atomic.Bool
}

// NewFaulty wraps s.
func newFaulty(s driver.Store) *faulty { return &faulty{Store: s} }

// SetDown makes every operation fail (true) or pass through (false).
func (f *faulty) SetDown(down bool) {
	f.claimDown.Store(down)
	f.extendDown.Store(down)
	f.finishDown.Store(down)
}

// SetExtendDown makes Extend alone fail.
func (f *faulty) SetExtendDown(down bool) { f.extendDown.Store(down) }

// SetFinishDown makes Complete and Release fail.
func (f *faulty) SetFinishDown(down bool) { f.finishDown.Store(down) }

// Claim implements driver.Store.
func (f *faulty) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimReply, error) {
	if f.claimDown.Load() {
		return driver.ClaimReply{}, errInjected
	}
	return f.Store.Claim(ctx, req)
}

// Extend implements driver.Store.
func (f *faulty) Extend(ctx context.Context, key string, token driver.Token, lease time.Duration) error {
	if f.extendDown.Load() {
		return errInjected
	}
	return f.Store.Extend(ctx, key, token, lease)
}

// Complete implements driver.Store.
func (f *faulty) Complete(ctx context.Context, req driver.CompleteRequest) error {
	if f.finishDown.Load() {
		return errInjected
	}
	return f.Store.Complete(ctx, req)
}

// Release implements driver.Store.
func (f *faulty) Release(ctx context.Context, key string, token driver.Token) error {
	if f.finishDown.Load() {
		return errInjected
	}
	return f.Store.Release(ctx, key, token)
}
