package riveronce

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/jobonce/jobonce/core"
)

// TxStore records a job's key in the caller's transaction and runs the job's
// function in it; *pgstore.Store implements it.
type TxStore interface {
	DoTxJob(ctx context.Context, tx pgx.Tx, job core.Job, fn func(ctx context.Context, tx pgx.Tx) error) (core.Outcome, error)
}

// TxBeginner begins transactions; *pgxpool.Pool implements it. It must reach
// the database that holds River's tables and the TxStore's table.
type TxBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// TxWorker is a River worker whose effect is written to the database in the
// transaction it is given. Embed river.WorkerDefaults[T] for Middleware,
// NextRetry and Timeout, and write WorkTx.
type TxWorker[T river.JobArgs] interface {
	Middleware(job *rivertype.JobRow) []rivertype.WorkerMiddleware
	NextRetry(job *river.Job[T]) time.Time
	Timeout(job *river.Job[T]) time.Duration
	// WorkTx performs the job's effect in tx. It must not commit or roll
	// back tx.
	WorkTx(ctx context.Context, tx pgx.Tx, job *river.Job[T]) error
}

// ErrGuardedTwice is returned (as an ordinary error, so River retries) by a
// transactional worker whose job is also guarded by Middleware: both would
// claim the same key. Exclude the transactional kinds from the middleware
// with Config.Skip.
var ErrGuardedTwice = errors.New("jobonce: transactional River worker is also guarded by riveronce.Middleware; exclude its kind with Config.Skip")

// commitHook, when set by a test, runs after the job's completion is written
// in the transaction and before the commit.
var commitHook func(ctx context.Context, job *rivertype.JobRow)

// txWrapped is a river.Worker that runs a TxWorker exactly once.
type txWrapped[T river.JobArgs] struct {
	inner TxWorker[T]
	store TxStore
	db    TxBeginner
	cfg   Config
}

// WrapTx returns a worker that gives w's database effect exactly-once
// semantics: in one transaction it records the job's key in store, runs
// w.WorkTx, and marks the job completed with river.JobCompleteTx, then
// commits. The record, the effect and the completion become durable
// together or not at all, so a crash at any point (even between the effect
// and the completion) leaves either all of them or none, and a later copy
// runs. Redis is not needed: store is a *pgstore.Store on the same database.
//
// Keys are as for Wrap. A copy that finds the key done completes without
// running w; a copy that finds it held by a transaction still open snoozes
// (river.JobSnooze, no attempt used); a conflict or an empty key cancels the
// job (river.JobCancel). A database error while beginning or recording is
// retried by River as a failed attempt (an error matching
// core.ErrStoreUnavailable), unless the job's context had ended: the error
// then matches ctx.Err() instead, as for Wrap. w's error rolls everything back and reaches
// River unchanged. It keeps w's Timeout, NextRetry and Middleware.
//
// It panics if store, db or w is nil.
func WrapTx[T river.JobArgs](store TxStore, db TxBeginner, w TxWorker[T], cfg *Config) river.Worker[T] {
	if store == nil || db == nil || w == nil {
		panic("riveronce: WrapTx: store, db and worker must not be nil")
	}
	c, err := cfg.withDefaults()
	if err != nil {
		panic("riveronce: WrapTx: " + err.Error())
	}
	return &txWrapped[T]{inner: w, store: store, db: db, cfg: c}
}

// Middleware returns the inner worker's middleware.
func (w *txWrapped[T]) Middleware(job *rivertype.JobRow) []rivertype.WorkerMiddleware {
	return w.inner.Middleware(job)
}

// NextRetry returns the inner worker's next retry time.
func (w *txWrapped[T]) NextRetry(job *river.Job[T]) time.Time { return w.inner.NextRetry(job) }

// Timeout returns the inner worker's timeout.
func (w *txWrapped[T]) Timeout(job *river.Job[T]) time.Duration { return w.inner.Timeout(job) }

// Work runs the inner worker's WorkTx exactly once.
func (w *txWrapped[T]) Work(ctx context.Context, job *river.Job[T]) error {
	if w.cfg.Skip != nil && w.cfg.Skip(job.JobRow) {
		return workTx(ctx, nil, w.db, job, core.Job{}, w.inner.WorkTx)
	}
	return workTx(ctx, w.store, w.db, job, w.cfg.job(job.JobRow, job.Args), w.inner.WorkTx)
}

// WorkTx is WrapTx for use inside a worker's own Work method, with the
// default keys (Keyer, metadata, or Kind + ":" + core.Fingerprint of the
// encoded args): it runs fn exactly once, in a transaction that also records
// the key and completes job, and returns the error Work should return.
func WorkTx[T river.JobArgs](ctx context.Context, store TxStore, db TxBeginner, job *river.Job[T],
	fn func(ctx context.Context, tx pgx.Tx) error,
) error {
	if store == nil || db == nil || fn == nil {
		return errors.New("jobonce: riveronce.WorkTx: store, db and fn must not be nil")
	}
	var cfg Config
	return workTx(ctx, store, db, job, cfg.job(job.JobRow, job.Args),
		func(ctx context.Context, tx pgx.Tx, _ *river.Job[T]) error { return fn(ctx, tx) })
}

// workTx runs fn exactly once in a transaction with the key's record and the
// job's completion. A nil store runs fn in the transaction without a record.
func workTx[T river.JobArgs](ctx context.Context, store TxStore, db TxBeginner, job *river.Job[T], key core.Job,
	fn func(ctx context.Context, tx pgx.Tx, job *river.Job[T]) error,
) error {
	if store != nil && guarded(ctx) {
		return ErrGuardedTwice
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return stopped(ctx, "begin", err)
		}
		return fmt.Errorf("%w: begin: %w", core.ErrStoreUnavailable, err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx) // a no-op after Commit
	}()
	body := func(ctx context.Context, tx pgx.Tx) error {
		if err := fn(ctx, tx, job); err != nil {
			return err
		}
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return fmt.Errorf("riveronce: complete job %d in the transaction: %w", job.ID, err)
		}
		if commitHook != nil {
			commitHook(ctx, job.JobRow)
		}
		return nil
	}
	out := core.Ran
	if store == nil {
		err = body(ctx, tx)
	} else {
		out, err = store.DoTxJob(ctx, tx, key, body)
	}
	if (out == core.Unavailable || out == core.Canceled) && ctx.Err() != nil {
		return stopped(ctx, "record the key", err)
	}
	if err != nil {
		return outcomeError(job.JobRow, out, err)
	}
	if out != core.Ran {
		return nil // a duplicate: River completes this copy
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("riveronce: commit job %d: %w", job.ID, err)
	}
	return nil
}

// stopped is the error of a transactional job whose context ended before its
// key was recorded: a database call that failed then failed because of it
// (or its failure no longer matters), so this is the job's cancellation, as
// core.Canceled is, not a store outage. It matches ctx.Err() and not
// core.ErrStoreUnavailable; River makes a job interrupted by its client's
// stop available again without using an attempt.
func stopped(ctx context.Context, step string, err error) error {
	return fmt.Errorf("riveronce: %s: stopped by the job's context: %w (%v)", step, ctx.Err(), err)
}
