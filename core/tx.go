package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/internal/jobctx"
	"github.com/jobonce/jobonce/internal/storecall"
	"github.com/jobonce/jobonce/internal/storedkey"
)

// TxGuard is a Guard's transactional mode: the key and the job's writes
// commit in one transaction. It needs a driver.TxStore for TTx: pgx.Tx
// (pgstore) or *dynamostore.Tx. It shares the Guard's keys, Retention,
// StoreTimeout and reports; it has no lease, and FailOpen does not apply.
type TxGuard[TTx any] struct {
	g     *Guard
	store driver.TxStore[TTx]
}

// NewTxGuard returns the transactional mode of g. It returns an error when g
// is nil or its store has no transactional mode for TTx.
func NewTxGuard[TTx any](g *Guard) (*TxGuard[TTx], error) {
	if g == nil {
		return nil, errors.New("jobonce: core: NewTxGuard: Guard is nil")
	}
	s, ok := g.store.Driver.(driver.TxStore[TTx])
	if !ok {
		var tx TTx
		return nil, fmt.Errorf("jobonce: core: NewTxGuard: the Guard's store (%T) has no transactional mode for %T", g.store.Driver, &tx)
	}
	return &TxGuard[TTx]{g: g, store: s}, nil
}

// Logger returns the Guard's logger (Config.Logger).
func (t *TxGuard[TTx]) Logger() *slog.Logger { return t.g.cfg.Logger }

// Do runs fn exactly once for key, in a transaction of its own that records
// key as done. fn must not commit or roll back tx.
//
//   - key is free: fn runs. Its error or panic rolls back and comes back
//     unchanged: Failed. Success commits, even after ctx ended: Ran, or
//     Failed with the commit's error.
//   - key is done: Duplicate.
//   - key is held by a live claim, or by a transaction past the store's
//     bound: Running and a *RunningError.
//   - the store failed: Unavailable, or Canceled when ctx ended first.
//   - an empty key or a nil fn: Rejected.
func (t *TxGuard[TTx]) Do(ctx context.Context, key string, fn func(ctx context.Context, tx TTx) error) (Outcome, error) {
	return t.run(ctx, Job{Key: key}, fn, "TxGuard.Do")
}

// Run is Do for a Job. Another fingerprint under the key gives Conflict
// (ErrConflict). job.Unguarded runs fn without a record: Unguarded.
func (t *TxGuard[TTx]) Run(ctx context.Context, job Job, fn func(ctx context.Context, tx TTx) error) (Outcome, error) {
	return t.run(ctx, job, fn, "TxGuard.Run")
}

// run is Run; caller names the exported function, in errors.
func (t *TxGuard[TTx]) run(ctx context.Context, job Job, fn func(ctx context.Context, tx TTx) error, caller string) (Outcome, error) {
	e := t.doInTx(ctx, job, fn, caller)
	t.g.obs.observe(ctx, e, job.skipHint())
	if e.Outcome == Unguarded {
		return Unguarded, nil // e.Err, if any, is the shadow mode's cause
	}
	return e.Outcome, e.Err
}

// doInTx runs job in a transaction of its own and returns its outcome as an
// Event, which it does not observe.
func (t *TxGuard[TTx]) doInTx(ctx context.Context, job Job, fn func(ctx context.Context, tx TTx) error, caller string) Event {
	g := t.g
	if fn == nil {
		return job.event(Rejected, fmt.Errorf("jobonce: core: %s: job function is nil", caller))
	}
	if err := ctx.Err(); err != nil {
		return job.event(Canceled, fmt.Errorf("jobonce: transaction not begun: stopped by the caller's context: %w", err))
	}
	sctx, cancel := context.WithTimeout(ctx, g.cfg.StoreTimeout)
	tx, err := t.begin(sctx)
	cancel()
	if err != nil {
		// Also in shadow mode: the job cannot run without its transaction.
		return storeFailure(ctx, "begin", err).withJob(&job)
	}
	committed := false
	defer func() {
		if committed {
			return
		}
		rctx, cancel := context.WithTimeout(storecall.Detach(ctx), g.cfg.StoreTimeout)
		defer cancel()
		if err := t.rollback(rctx, tx); err != nil {
			g.cfg.Logger.WarnContext(ctx, "jobonce: rollback failed; the database ends the transaction with its connection",
				"key", job.Key, "error", err)
		}
	}()
	e := t.do(ctx, tx, job, fn)
	if e.Outcome != Ran && e.Outcome != Unguarded {
		return e
	}
	sctx, cancel = context.WithTimeout(storecall.Detach(ctx), g.cfg.StoreTimeout)
	defer cancel()
	if err := t.commit(sctx, tx); err != nil {
		e.Outcome, e.Err = Failed, fmt.Errorf("jobonce: commit: %w", err)
		return e
	}
	committed = true
	return e
}

// do records job in tx and runs fn, and returns the outcome as an Event,
// which it does not observe (a panic excepted).
func (t *TxGuard[TTx]) do(ctx context.Context, tx TTx, job Job, fn func(ctx context.Context, tx TTx) error) Event {
	g := t.g
	var fence int64
	var wouldSkip Outcome
	var cause error
	var lag time.Duration
	if !job.Unguarded {
		key, ok := storedkey.Key(g.cfg.KeyPrefix, job.Key, g.cfg.PlainKeys)
		var err error
		if !ok {
			err = errEmptyKey
		}
		if err != nil && !g.cfg.Shadow {
			return job.event(Rejected, err)
		}
		if err != nil {
			wouldSkip, cause = Rejected, err
		} else {
			if err := ctx.Err(); err != nil {
				return job.event(Canceled, fmt.Errorf("jobonce: record stopped by the caller's context: %w", err))
			}
			fp := storedkey.Fingerprint(job.Fingerprint)
			sctx, cancel := context.WithTimeout(ctx, g.cfg.StoreTimeout)
			reply, err := t.record(sctx, tx, driver.RecordRequest{Key: key, Fingerprint: fp, Retention: g.cfg.Retention})
			cancel()
			switch {
			case err != nil:
				e := storeFailure(ctx, "record", err).withJob(&job)
				if !g.cfg.Shadow || e.Outcome == Canceled {
					return e
				}
				wouldSkip, cause = Unavailable, e.Err
			default:
				out, err := decide(&g.cfg, g.obs, job, fp, reply)
				if out == Duplicate {
					lag = lagOf(reply.Remaining, g.cfg.Retention)
				}
				switch {
				case out == 0:
					fence = reply.Fence
				case !g.cfg.Shadow:
					e := job.event(out, err)
					e.Lag = lag
					return e
				default:
					wouldSkip = out
					if out == Unavailable {
						cause = err
					}
				}
			}
		}
	}
	if wouldSkip != 0 && ctx.Err() != nil {
		return job.event(Canceled, fmt.Errorf("jobonce: job not run: stopped by the caller's context: %w", ctx.Err()))
	}
	start := time.Now()
	finished := false
	defer func() {
		if !finished {
			r := recover()
			e := job.event(Failed, fmt.Errorf("jobonce: job panicked: %v", r))
			e.Duration, e.WouldSkip, e.Lag = time.Since(start), wouldSkip, lag
			g.obs.observe(ctx, e, job.skipHint())
			if r != nil {
				panic(r)
			}
		}
	}()
	err := fn(jobctx.With(ctx, g.cfg.KeyPrefix, job.Key, fence), tx)
	finished = true
	var e Event
	switch {
	case err != nil:
		e = job.event(Failed, err)
	case job.Unguarded || wouldSkip != 0:
		e = job.event(Unguarded, cause)
	default:
		e = job.event(Ran, nil)
	}
	e.Duration, e.WouldSkip, e.Lag = time.Since(start), wouldSkip, lag
	return e
}

// The TxGuard calls its store through these methods: a store method that
// panics fails its call with an error (storecall.ErrPanicked).

func (t *TxGuard[TTx]) record(ctx context.Context, tx TTx, req driver.RecordRequest) (reply driver.ClaimReply, err error) {
	defer storecall.Recover(&err)
	return t.store.RecordTx(ctx, tx, req)
}

func (t *TxGuard[TTx]) begin(ctx context.Context) (tx TTx, err error) {
	defer storecall.Recover(&err)
	return t.store.BeginTx(ctx)
}

func (t *TxGuard[TTx]) commit(ctx context.Context, tx TTx) (err error) {
	defer storecall.Recover(&err)
	return t.store.CommitTx(ctx, tx)
}

func (t *TxGuard[TTx]) rollback(ctx context.Context, tx TTx) (err error) {
	defer storecall.Recover(&err)
	return t.store.RollbackTx(ctx, tx)
}

// storeFailure classifies a failed store step of the transactional mode:
// Canceled (matching ctx.Err()) when the caller's context ended, else
// Unavailable (ErrStoreUnavailable). Nothing ran.
func storeFailure(ctx context.Context, step string, err error) Event {
	if cerr := ctx.Err(); cerr != nil {
		return Event{Outcome: Canceled, Err: fmt.Errorf("jobonce: %s stopped by the caller's context: %w (%w)", step, cerr, err)}
	}
	return Event{Outcome: Unavailable, Err: fmt.Errorf("%w: %s: %w", ErrStoreUnavailable, step, err)}
}

// withJob returns e as an outcome of job.
func (e Event) withJob(job *Job) Event {
	e.Key, e.Kind, e.Source = job.Key, job.Kind, job.Source
	return e
}
