package storetest

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/jobonce/jobonce/core/driver"
)

// ErrInjected is the error a Faulty store returns while it is down.
var ErrInjected = errors.New("storetest: injected store failure")

// Faulty wraps a real store and fails chosen operations on demand, to test
// what a Guard does when its store stops answering.
type Faulty struct {
	driver.Store
	claimDown  atomic.Bool
	extendDown atomic.Bool
	finishDown atomic.Bool
}

// NewFaulty wraps s.
func NewFaulty(s driver.Store) *Faulty { return &Faulty{Store: s} }

// SetDown makes every operation fail (true) or pass through (false).
func (f *Faulty) SetDown(down bool) {
	f.claimDown.Store(down)
	f.extendDown.Store(down)
	f.finishDown.Store(down)
}

// SetExtendDown makes Extend alone fail.
func (f *Faulty) SetExtendDown(down bool) { f.extendDown.Store(down) }

// SetFinishDown makes Complete and Release fail.
func (f *Faulty) SetFinishDown(down bool) { f.finishDown.Store(down) }

// Claim implements driver.Store.
func (f *Faulty) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimReply, error) {
	if f.claimDown.Load() {
		return driver.ClaimReply{}, ErrInjected
	}
	return f.Store.Claim(ctx, req)
}

// Extend implements driver.Store.
func (f *Faulty) Extend(ctx context.Context, key string, token driver.Token, lease time.Duration) error {
	if f.extendDown.Load() {
		return ErrInjected
	}
	return f.Store.Extend(ctx, key, token, lease)
}

// Complete implements driver.Store.
func (f *Faulty) Complete(ctx context.Context, req driver.CompleteRequest) error {
	if f.finishDown.Load() {
		return ErrInjected
	}
	return f.Store.Complete(ctx, req)
}

// Release implements driver.Store.
func (f *Faulty) Release(ctx context.Context, key string, token driver.Token) error {
	if f.finishDown.Load() {
		return ErrInjected
	}
	return f.Store.Release(ctx, key, token)
}
