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
	"github.com/jobonce/jobonce/internal/nilcheck"
)

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

// ErrGuardedTwice is the error of WorkTx called for a job that the
// middleware or Wrap guards too. River retries it as an ordinary error, so
// the job is discarded unrun after its last attempt. Exempt the kind with
// the middleware's Config.Unguarded, or use WrapTx, which the middleware
// leaves alone.
var ErrGuardedTwice = errors.New("jobonce: riveronce: transactional River worker is also guarded by the middleware; exclude its kind with Config.Unguarded")

// commitHook, when set by a test, runs after the job's completion is written
// in the transaction and before the commit.
var commitHook func(ctx context.Context, job *rivertype.JobRow)

// txWrapped is a river.Worker that runs a TxWorker exactly once.
type txWrapped[T river.JobArgs] struct {
	inner    TxWorker[T]
	tg       *core.TxGuard[pgx.Tx]
	cfg      Config
	periodic periodicWarning
}

// WrapTx returns a worker that runs w.WorkTx exactly once through tg, the
// transactional mode of a Guard on a *pgstore.Store in River's database. In
// one transaction, the worker records the job's key, runs w.WorkTx, and
// completes the job with river.JobCompleteTx. The three become durable
// together or not at all, even across a crash. Redis is not needed: tg is
// core.NewTxGuard[pgx.Tx](guard), for a Guard on pgstore.New over River's
// pool.
//
// Keys and outcomes are as for Wrap, with these differences:
//
//   - a copy that finds the key held by an open transaction snoozes, without
//     Config.WaitRunning's wait;
//   - w's error rolls the transaction back and reaches River unchanged;
//   - a database error while beginning or recording matches
//     core.ErrStoreUnavailable, even when the Guard fails open.
//
// The riveronce middleware leaves its jobs to it, as it does Wrap's. It
// keeps w's Timeout, NextRetry and Middleware. WrapTx returns an error when
// tg or w is nil, or when cfg sets Unguarded, which would run jobs without
// their record.
func WrapTx[T river.JobArgs](tg *core.TxGuard[pgx.Tx], w TxWorker[T], cfg *Config) (river.Worker[T], error) {
	if tg == nil {
		return nil, errors.New("jobonce: riveronce: WrapTx: TxGuard is nil")
	}
	if nilcheck.IsNil(w) {
		return nil, errors.New("jobonce: riveronce: WrapTx: worker is nil")
	}
	if cfg != nil && cfg.Unguarded != nil {
		return nil, errors.New("jobonce: riveronce: WrapTx: Config.Unguarded is set: a transactional worker records every job it runs; give WrapTx a Config without it")
	}
	return &txWrapped[T]{inner: w, tg: tg, cfg: cfg.withDefaults()}, nil
}

// MustWrapTx is WrapTx for the one-line river.AddWorker form. It panics
// with WrapTx's error.
func MustWrapTx[T river.JobArgs](tg *core.TxGuard[pgx.Tx], w TxWorker[T], cfg *Config) river.Worker[T] {
	return must(WrapTx(tg, w, cfg))
}

// Middleware returns the inner worker's middleware after the mark that
// leaves the job to WrapTx's record.
func (w *txWrapped[T]) Middleware(job *rivertype.JobRow) []rivertype.WorkerMiddleware {
	return withMark(w.inner.Middleware(job))
}

// NextRetry returns the inner worker's next retry time.
func (w *txWrapped[T]) NextRetry(job *river.Job[T]) time.Time { return w.inner.NextRetry(job) }

// Timeout returns the inner worker's timeout.
func (w *txWrapped[T]) Timeout(job *river.Job[T]) time.Duration { return w.inner.Timeout(job) }

// Work runs the inner worker's WorkTx exactly once.
func (w *txWrapped[T]) Work(ctx context.Context, job *river.Job[T]) error {
	key, unusable := w.cfg.job(job.JobRow, job.Args)
	w.periodic.log(ctx, w.tg.Logger(), job.JobRow, unusable)
	return workTx(ctx, w.tg, job, key, w.inner.WorkTx)
}

// WorkTx is WrapTx for use inside a worker's own Work method. It runs fn
// exactly once, in a transaction that also records the key and completes
// job. The key is the args' OnceKey (Keyer), else DefaultKey. It returns
// the error Work should return, or an error for a nil tg, job or fn. Under
// the riveronce middleware, exempt its kind (see ErrGuardedTwice).
func WorkTx[T river.JobArgs](ctx context.Context, tg *core.TxGuard[pgx.Tx], job *river.Job[T],
	fn func(ctx context.Context, tx pgx.Tx) error,
) error {
	switch {
	case tg == nil:
		return errors.New("jobonce: riveronce: WorkTx: TxGuard is nil")
	case job == nil:
		return errors.New("jobonce: riveronce: WorkTx: job is nil")
	case fn == nil:
		return errors.New("jobonce: riveronce: WorkTx: fn is nil")
	}
	var cfg Config
	key, unusable := cfg.job(job.JobRow, job.Args)
	workTxPeriodic.log(ctx, tg.Logger(), job.JobRow, unusable)
	return workTx(ctx, tg, job, key,
		func(ctx context.Context, tx pgx.Tx, _ *river.Job[T]) error { return fn(ctx, tx) })
}

// workTxPeriodic is WorkTx's warning about unusable periodic metadata: once
// per process, since WorkTx keeps no state.
var workTxPeriodic periodicWarning

// workTx runs fn exactly once in a transaction with the key's record and the
// job's completion (an unguarded key: in a transaction without a record).
func workTx[T river.JobArgs](ctx context.Context, tg *core.TxGuard[pgx.Tx], job *river.Job[T], key core.Job,
	fn func(ctx context.Context, tx pgx.Tx, job *river.Job[T]) error,
) error {
	if !key.Unguarded && guarded(ctx) {
		return ErrGuardedTwice
	}
	out, err := tg.Run(ctx, key, func(ctx context.Context, tx pgx.Tx) error {
		if err := fn(ctx, tx, job); err != nil {
			return err
		}
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return fmt.Errorf("jobonce: riveronce: complete job %d in the transaction: %w", job.ID, err)
		}
		if commitHook != nil {
			commitHook(ctx, job.JobRow)
		}
		return nil
	})
	return outcomeError(job.JobRow, out, err)
}
