package core

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobonce/jobonce/core/driver"
)

// TxGuard is a Guard's transactional mode, for jobs whose effect is a write
// to the database that keeps the keys: the key is recorded as done in the
// same transaction as the job's effect, so both commit or neither does, and
// a crash at any point leaves either both or none, exactly once. It needs a
// store that implements driver.TxStore for TTx (pgstore: pgx.Tx).
//
// The Guard's KeyPrefix, PlainKeys, Retention, StoreTimeout and retry hints
// apply, and every outcome is decided, logged, counted and observed as the
// Guard's own, so a key recorded by a TxGuard and the same key run through
// the Guard are one key. There is no lease or heartbeat: the transaction's
// row lock holds the key while the job runs. FailOpen does not apply: a
// job whose key cannot be recorded does not run.
type TxGuard[TTx any] struct {
	g     *Guard
	store driver.TxStore[TTx]
}

// NewTxGuard returns the transactional mode of g. It returns an error when
// g is nil or its store has no transactional mode for TTx.
func NewTxGuard[TTx any](g *Guard) (*TxGuard[TTx], error) {
	if g == nil {
		return nil, errors.New("jobonce: NewTxGuard: Guard is nil")
	}
	s, ok := g.store.(driver.TxStore[TTx])
	if !ok {
		var tx TTx
		return nil, fmt.Errorf("jobonce: NewTxGuard: the Guard's store (%T) has no transactional mode for %T", g.store, &tx)
	}
	return &TxGuard[TTx]{g: g, store: s}, nil
}

// Do runs fn at most once for key, exactly once per committed transaction:
// it records key as done in tx, then runs fn in tx. The caller commits tx
// when Do succeeds and rolls it back otherwise.
//
//   - key is free: fn runs. Its error comes back unchanged with outcome
//     Failed, and the caller must roll back. Success gives Ran and a nil
//     error (reported before the caller's commit, which makes it durable).
//   - key is done (committed by another transaction, or by the Guard):
//     Duplicate and a nil error; fn does not run.
//   - key is held by a transaction that does not commit within the store's
//     bound, or by a live claim of the Guard: Running and a *RunningError.
//   - a different fingerprint (DoJob): Conflict, matching ErrConflict.
//   - the record cannot be written: Unavailable (ErrStoreUnavailable), or
//     Canceled (matching ctx.Err()) when ctx ended first.
//   - an empty key, a nil tx or a nil fn: Rejected.
//
// On every outcome but Ran and Failed, tx is left as it was and usable.
func (t *TxGuard[TTx]) Do(ctx context.Context, tx TTx, key string, fn func(ctx context.Context, tx TTx) error) (Outcome, error) {
	return t.DoJob(ctx, tx, Job{Key: key}, fn)
}

// DoJob is Do with a payload fingerprint: when job.Fingerprint is set and
// the key is done or held with a different one, the outcome is Conflict.
// job.Unguarded runs fn in tx without a record, reported as Unguarded.
func (t *TxGuard[TTx]) DoJob(ctx context.Context, tx TTx, job Job, fn func(ctx context.Context, tx TTx) error) (Outcome, error) {
	out, ran, err := t.do(ctx, tx, job, fn)
	t.g.observe(ctx, job.Key, out, err, ran)
	return out, err
}

// DoInTx is DoJob in a transaction of its own, begun on the store's
// database: it commits when fn succeeded and rolls back otherwise. Ran is
// reported once the commit succeeded. A failed commit gives Failed and the
// commit's error: the job did not happen, or if the commit went through
// unseen, a later copy finds it done. A failed begin is Unavailable (or
// Canceled when ctx ended first).
func (t *TxGuard[TTx]) DoInTx(ctx context.Context, job Job, fn func(ctx context.Context, tx TTx) error) (Outcome, error) {
	out, ran, err := t.doInTx(ctx, job, fn)
	t.g.observe(ctx, job.Key, out, err, ran)
	return out, err
}

func (t *TxGuard[TTx]) doInTx(ctx context.Context, job Job, fn func(ctx context.Context, tx TTx) error) (Outcome, time.Duration, error) {
	if fn == nil {
		return Rejected, 0, errors.New("jobonce: TxGuard.DoInTx: function is nil")
	}
	if err := ctx.Err(); err != nil {
		return Canceled, 0, fmt.Errorf("jobonce: transaction not begun: stopped by the caller's context: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, t.g.cfg.StoreTimeout)
	tx, err := t.store.BeginTx(sctx)
	cancel()
	if err != nil {
		return t.g.storeFailure(ctx, "begin", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.g.cfg.StoreTimeout)
		defer cancel()
		_ = t.store.RollbackTx(rctx, tx) // after a commit: a no-op
	}()
	out, ran, err := t.do(ctx, tx, job, fn)
	if out != Ran && out != Unguarded {
		return out, ran, err
	}
	sctx, cancel = context.WithTimeout(ctx, t.g.cfg.StoreTimeout)
	defer cancel()
	if err := t.store.CommitTx(sctx, tx); err != nil {
		return Failed, ran, fmt.Errorf("jobonce: commit: %w", err)
	}
	return out, ran, nil
}

// do records job in tx and runs fn: the outcome, its error, and how long
// fn ran. It observes nothing; its callers do, once.
func (t *TxGuard[TTx]) do(ctx context.Context, tx TTx, job Job, fn func(ctx context.Context, tx TTx) error) (out Outcome, ran time.Duration, err error) {
	g := t.g
	switch {
	case fn == nil:
		return Rejected, 0, errors.New("jobonce: TxGuard: function is nil")
	case any(tx) == nil:
		return Rejected, 0, errors.New("jobonce: TxGuard: transaction is nil")
	}
	if !job.Unguarded {
		key, err := storedKey(g.cfg.KeyPrefix, job.Key, g.cfg.PlainKeys)
		if err != nil {
			return Rejected, 0, err
		}
		if err := ctx.Err(); err != nil {
			return Canceled, 0, fmt.Errorf("jobonce: record stopped by the caller's context: %w", err)
		}
		fp := storedFingerprint(job.Fingerprint)
		sctx, cancel := context.WithTimeout(ctx, g.cfg.StoreTimeout)
		reply, err := t.record(sctx, tx, driver.RecordRequest{Key: key, Fingerprint: fp, Retention: g.cfg.Retention})
		cancel()
		if err != nil {
			return g.storeFailure(ctx, "record", err)
		}
		if out, err := g.decide(job, fp, reply); out != 0 {
			return out, 0, err
		}
	}
	start := time.Now()
	finished := false
	defer func() {
		if !finished {
			r := recover()
			g.observe(ctx, job.Key, Failed, fmt.Errorf("jobonce: job panicked: %v", r), time.Since(start))
			panic(r)
		}
	}()
	err = fn(ctx, tx)
	finished = true
	ran = time.Since(start)
	switch {
	case err != nil:
		return Failed, ran, err
	case job.Unguarded:
		return Unguarded, ran, nil
	}
	return Ran, ran, nil
}

// record calls the store's RecordTx, a panic failing the call.
func (t *TxGuard[TTx]) record(ctx context.Context, tx TTx, req driver.RecordRequest) (reply driver.ClaimReply, err error) {
	defer storePanic(&err)
	return t.store.RecordTx(ctx, tx, req)
}

// storeFailure classifies a failed store step of the transactional mode:
// Canceled (matching ctx.Err()) when the caller's context ended, else
// Unavailable (ErrStoreUnavailable). Nothing ran.
func (g *Guard) storeFailure(ctx context.Context, step string, err error) (Outcome, time.Duration, error) {
	if cerr := ctx.Err(); cerr != nil {
		return Canceled, 0, fmt.Errorf("jobonce: %s stopped by the caller's context: %w (%w)", step, cerr, err)
	}
	return Unavailable, 0, fmt.Errorf("%w: %s: %w", ErrStoreUnavailable, step, err)
}
