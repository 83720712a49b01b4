// Package storecall is how jobonce's core calls a driver.Store: a store
// method that panics fails its call with ErrPanicked rather than taking
// the caller's goroutine down, a batch is answered once per request, and a
// call that must outlive its caller's cancellation runs on Detach.
package storecall

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jobonce/jobonce/core/driver"
)

var (
	// ErrPanicked fails a store call that panicked, and every call of a
	// batch whose store call panicked.
	ErrPanicked = errors.New("jobonce: store call panicked")
	// ErrStuck fails a call whose shared round trip outlived its bound (a
	// store that does not honour its context).
	ErrStuck = errors.New("jobonce: store call did not return within StoreTimeout")
	// ErrBatchReplies fails every call of a batch the store answered with
	// the wrong number of replies.
	ErrBatchReplies = errors.New("jobonce: store answered a batch with the wrong number of replies")
)

// Recover, deferred by a store call, turns its panic into ErrPanicked in
// *err.
func Recover(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%w: %v", ErrPanicked, r)
	}
}

// Detach returns ctx without its cancellation, for store calls that must
// run even once the caller has stopped (done markers, releases): ctx itself
// when it cannot be cancelled, saving an allocation.
func Detach(ctx context.Context) context.Context {
	if ctx.Done() == nil {
		return ctx
	}
	return context.WithoutCancel(ctx)
}

// Ended returns ctx.Err(), or context.DeadlineExceeded once ctx's deadline
// has passed by the clock though its timer has not fired yet. A store
// client that sets its socket's deadline from ctx (go-redis with
// ContextTimeoutEnabled) can fail a call with an i/o timeout an instant
// before ctx itself reports its end: that failure is the caller's
// deadline, not an outage, and must not run the job unguarded.
func Ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// Batch calls send and returns one answer per request. It never panics: a
// send that panics, or answers with the wrong number of replies, fails
// every request, so no request can mistake a missing answer for success.
func Batch[I, O any](ctx context.Context, send func(context.Context, []I) ([]O, []error), in []I) (outs []O, errs []error) {
	defer func() {
		if r := recover(); r != nil {
			outs, errs = failAll[O](len(in), fmt.Errorf("%w: %v", ErrPanicked, r))
		}
	}()
	outs, errs = send(ctx, in)
	if len(outs) != len(in) || len(errs) != len(in) {
		return failAll[O](len(in), fmt.Errorf("%w: %d requests, %d replies, %d errors", ErrBatchReplies, len(in), len(outs), len(errs)))
	}
	return outs, errs
}

func failAll[O any](n int, err error) ([]O, []error) {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return make([]O, n), errs
}

// Store calls a driver.Store for a Guard: each call recovers the store's
// panic (ErrPanicked).
type Store struct {
	Driver   driver.Store
	Batcher  driver.BatchStore // nil when the store does not batch
	Notifier driver.Notifier   // nil when the store does not notify
	// Timeout bounds Release: the Guard's StoreTimeout.
	Timeout time.Duration
	Logger  *slog.Logger
}

// New returns the Store that calls store.
func New(store driver.Store, timeout time.Duration, logger *slog.Logger) *Store {
	s := &Store{Driver: store, Timeout: timeout, Logger: logger}
	s.Batcher, _ = store.(driver.BatchStore)
	s.Notifier, _ = store.(driver.Notifier)
	return s
}

// Claim calls the store's Claim.
func (s *Store) Claim(ctx context.Context, req driver.ClaimRequest) (reply driver.ClaimReply, err error) {
	defer Recover(&err)
	return s.Driver.Claim(ctx, req)
}

// Await calls the Notifier's Await.
func (s *Store) Await(ctx context.Context, req driver.ClaimRequest) (reply driver.ClaimReply, err error) {
	defer Recover(&err)
	return s.Notifier.Await(ctx, req)
}

// Extend calls the store's Extend.
func (s *Store) Extend(ctx context.Context, key string, token driver.Token, lease time.Duration) (err error) {
	defer Recover(&err)
	return s.Driver.Extend(ctx, key, token, lease)
}

// Complete calls the store's Complete.
func (s *Store) Complete(ctx context.Context, req driver.CompleteRequest) (err error) {
	defer Recover(&err)
	return s.Driver.Complete(ctx, req)
}

// Ready calls rs's Ready.
func (s *Store) Ready(ctx context.Context, rs driver.ReadyStore) (err error) {
	defer Recover(&err)
	return rs.Ready(ctx)
}

// TryRelease calls the store's Release.
func (s *Store) TryRelease(ctx context.Context, key string, token driver.Token) (err error) {
	defer Recover(&err)
	return s.Driver.Release(ctx, key, token)
}

// Release deletes a claim so a retry can run at once, under ctx detached
// and bounded by Timeout. Failure is harmless: the claim expires with its
// lease.
func (s *Store) Release(ctx context.Context, key string, token driver.Token) {
	sctx, cancel := context.WithTimeout(Detach(ctx), s.Timeout)
	defer cancel()
	s.ReleaseWithin(sctx, key, token)
}

// ReleaseWithin is Release under a context the caller bounded.
func (s *Store) ReleaseWithin(ctx context.Context, key string, token driver.Token) {
	if err := s.TryRelease(ctx, key, token); err != nil && !errors.Is(err, driver.ErrLeaseLost) {
		s.Logger.WarnContext(ctx, "jobonce: release failed; the claim expires with its lease",
			"key", key, "error", err)
	}
}

// CompleteWithin writes a done marker on its own, retrying store failures
// after completeBackoff until sctx, which the caller bounded, ends.
//
// prev is the error of an attempt made before, if any. Every attempt sends
// the same request: one that an earlier attempt wrote (its reply lost, or
// answered ErrUnreplicated) finds this claim's own marker, answered nil
// (and acknowledged anew), and one that finds another claim's marker, or
// none, is ErrLeaseLost.
func (s *Store) CompleteWithin(sctx context.Context, req driver.CompleteRequest, prev error) error {
	for attempt := 0; ; attempt++ {
		if prev != nil || attempt > 0 {
			pause := time.NewTimer(completeBackoff[min(attempt, len(completeBackoff)-1)])
			select {
			case <-pause.C:
			case <-sctx.Done():
				pause.Stop()
				return prev
			}
		}
		err := s.Complete(sctx, req)
		if err == nil || MarkerFinal(err) || sctx.Err() != nil {
			return err
		}
		prev = err
	}
}

// completeBackoff is the wait before each retry of a failed Complete; the
// last one repeats until the marker's StoreTimeout ends, so a marker
// outlasts a failover shorter than that.
var completeBackoff = [...]time.Duration{10 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond}

// MarkerFinal reports whether a failed done marker's write is final, not to
// be tried again: the token lost the key. (A marker written but not
// acknowledged, ErrUnreplicated, is sent again, as any other failure: the
// store knows its own marker.)
func MarkerFinal(err error) bool { return errors.Is(err, driver.ErrLeaseLost) }

// ClaimBatch claims reqs in one round trip of the Batcher.
func (s *Store) ClaimBatch(ctx context.Context, reqs []driver.ClaimRequest) ([]driver.ClaimReply, []error) {
	return Batch(ctx, func(ctx context.Context, reqs []driver.ClaimRequest) ([]driver.ClaimReply, []error) {
		replies, errs, completeErrs := s.Batcher.Batch(ctx, nil, reqs)
		if len(completeErrs) != 0 {
			return nil, nil // Batch fails every call
		}
		return replies, errs
	}, reqs)
}

// CompleteBatch writes the done markers of reqs in one round trip of the
// Batcher.
func (s *Store) CompleteBatch(ctx context.Context, reqs []driver.CompleteRequest) []error {
	_, errs := Batch(ctx, func(ctx context.Context, reqs []driver.CompleteRequest) ([]struct{}, []error) {
		replies, claimErrs, errs := s.Batcher.Batch(ctx, reqs, nil)
		if len(replies) != 0 || len(claimErrs) != 0 {
			return nil, nil // Batch fails every call
		}
		return make([]struct{}, len(reqs)), errs
	}, reqs)
	return errs
}
