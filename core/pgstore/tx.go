package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobonce/jobonce/core"
)

// rollbackTimeout bounds the statements that undo a failed record attempt,
// which run even when the caller's context is done.
const rollbackTimeout = 5 * time.Second

// DoTx runs fn at most once for key, exactly once per committed transaction:
// it records key as done in tx, then runs fn in the same tx. When the caller
// commits, the record and fn's effects become durable together; when it rolls
// back (or its connection dies), neither exists and a later copy runs.
//
//   - key is free (absent, or its row expired): fn runs; its error comes back
//     unchanged with outcome core.Failed, and the caller must roll back.
//     Success gives core.Ran and a nil error; the caller commits.
//   - key is done (committed by another transaction, or by a Guard): outcome
//     core.Duplicate and a nil error; fn does not run.
//   - key is held: by a transaction that has not committed within
//     Config.LockTimeout, or by a live claim of a core.Guard: outcome
//     core.Running and a *core.RunningError (core.ErrRunning); fn does not run.
//   - an empty key: core.Rejected and an error matching core.ErrInvalidKey.
//   - a database error while recording: core.Unavailable and an error
//     matching core.ErrStoreUnavailable; core.Canceled and an error matching
//     ctx.Err() when ctx ended first.
//
// The record is written inside a savepoint with lock_timeout set to
// Config.LockTimeout, and the caller's lock_timeout is restored afterwards;
// on Running, Duplicate or Unavailable, tx is left as it was and usable. The
// key is stored as StoredKey returns it (as a core.Guard with the same
// prefix stores it) and kept for Config.Retention on the database clock.
// Use READ COMMITTED (PostgreSQL's default): under REPEATABLE READ a copy
// that finds the key committed after its snapshot gets a serialization
// failure (Unavailable) instead of Duplicate.
func (s *Store) DoTx(ctx context.Context, tx pgx.Tx, key string, fn func(ctx context.Context, tx pgx.Tx) error) (core.Outcome, error) {
	return s.DoTxJob(ctx, tx, core.Job{Key: key}, fn)
}

// DoTxJob is DoTx with a payload fingerprint: when job.Fingerprint is set
// and the key is done or held with a different one, the outcome is
// core.Conflict and the error matches core.ErrConflict.
func (s *Store) DoTxJob(ctx context.Context, tx pgx.Tx, job core.Job, fn func(ctx context.Context, tx pgx.Tx) error) (core.Outcome, error) {
	if tx == nil {
		return core.Rejected, errors.New("jobonce: pgstore.DoTx: tx is nil")
	}
	if fn == nil {
		return core.Rejected, errors.New("jobonce: pgstore.DoTx: function is nil")
	}
	key, err := s.StoredKey(job.Key)
	if err != nil {
		return core.Rejected, err
	}
	if out, err := s.record(ctx, tx, key, job); out != 0 {
		return out, err
	}
	if err := fn(ctx, tx); err != nil {
		return core.Failed, err
	}
	return core.Ran, nil
}

// DoInTx is DoTx in a transaction of its own on the Store's pool: it begins
// a transaction, runs DoTx, and commits when fn succeeded (rolling back
// otherwise). A failed commit gives core.Failed and the commit's error: the
// job did not happen, or if the commit went through unseen, a retry finds it
// done.
func (s *Store) DoInTx(ctx context.Context, key string, fn func(ctx context.Context, tx pgx.Tx) error) (core.Outcome, error) {
	if fn == nil {
		return core.Rejected, errors.New("jobonce: pgstore.DoInTx: function is nil")
	}
	if key == "" {
		return core.Rejected, fmt.Errorf("%w: key is empty", core.ErrInvalidKey)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return unavailable(ctx, err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		_ = tx.Rollback(rctx) // after Commit: a no-op
	}()
	out, err := s.DoTx(ctx, tx, key, fn)
	if out != core.Ran {
		return out, err
	}
	if err := tx.Commit(ctx); err != nil {
		return core.Failed, fmt.Errorf("jobonce: pgstore.DoInTx: commit: %w", err)
	}
	return core.Ran, nil
}

// StoredKey returns the key DoTx records for a user key: Config.KeyPrefix
// and the key, hashed unless Config.PlainKeys is set, exactly as a core.Guard
// with the same prefix and PlainKeys setting stores it. It returns an error
// matching core.ErrInvalidKey for an empty key.
func (s *Store) StoredKey(key string) (string, error) {
	return core.StoredKey(s.cfg.KeyPrefix, key, s.cfg.PlainKeys)
}

// txState is a key's row as tx_state.sql reads it.
type txState struct {
	found, done, live bool
	fingerprint       []byte
	remaining         int64 // microseconds
}

// record writes key as done in tx, in one round trip. It returns 0 when the
// key was recorded, or the final outcome and error when it was not.
func (s *Store) record(ctx context.Context, tx pgx.Tx, key string, job core.Job) (core.Outcome, error) {
	k := []byte(key)
	for attempt := 1; ; attempt++ {
		b := &pgx.Batch{}
		b.Queue(s.sql.txSavepoint)
		b.Queue(s.sql.txLockTimeout, s.lockTimeout)
		b.Queue(s.sql.txTakeover, k)
		b.Queue(s.sql.txRecord, k, []byte(job.Fingerprint), s.cfg.Retention.Microseconds())
		b.Queue(s.sql.txState, k)
		b.Queue(s.sql.txRestore)
		b.Queue(s.sql.txRelease)
		br := tx.SendBatch(ctx, b)
		recorded, st, err := readRecord(br)
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
			_, rerr := tx.Exec(rctx, s.sql.txRollback)
			cancel()
			if lockTimedOut(err) && rerr == nil {
				return core.Running, &core.RunningError{RetryAfter: s.cfg.RetryAfter}
			}
			return unavailable(ctx, errors.Join(s.fail(ctx, err), rerr))
		}
		if recorded {
			return 0, nil
		}
		if st.found && st.live {
			if job.Fingerprint != "" && len(st.fingerprint) > 0 && job.Fingerprint != string(st.fingerprint) {
				state := "running"
				if st.done {
					state = "done"
				}
				return core.Conflict, fmt.Errorf("%w: key %q is %s with fingerprint %q, this delivery has %q",
					core.ErrConflict, job.Key, state, st.fingerprint, job.Fingerprint)
			}
			if st.done {
				return core.Duplicate, nil
			}
			retry := max(time.Duration(st.remaining)*time.Microsecond, s.cfg.LockTimeout)
			return core.Running, &core.RunningError{RetryAfter: retry}
		}
		// The row expired or vanished between the statements: try again.
		if attempt == claimAttempts {
			return core.Running, &core.RunningError{RetryAfter: s.cfg.LockTimeout}
		}
	}
}

// readRecord reads the results of the batch queued by record, in order.
func readRecord(br pgx.BatchResults) (recorded bool, st txState, err error) {
	for range 3 { // savepoint, lock_timeout, takeover
		if _, err = br.Exec(); err != nil {
			return false, st, err
		}
	}
	rows, err := br.Query()
	if err != nil {
		return false, st, err
	}
	recorded = rows.Next()
	rows.Close()
	if err = rows.Err(); err != nil {
		return false, st, err
	}
	rows, err = br.Query()
	if err != nil {
		return false, st, err
	}
	if rows.Next() {
		st.found = true
		err = rows.Scan(&st.done, &st.fingerprint, &st.remaining, &st.live)
	}
	rows.Close()
	if err == nil {
		err = rows.Err()
	}
	if err != nil {
		return false, st, err
	}
	for range 2 { // restore lock_timeout, release savepoint
		if _, err = br.Exec(); err != nil {
			return false, st, err
		}
	}
	return recorded, st, nil
}

// unavailable reports a database error: Canceled, matching ctx.Err(), when
// the caller's context ended, else Unavailable (core.ErrStoreUnavailable).
func unavailable(ctx context.Context, err error) (core.Outcome, error) {
	if cerr := ctx.Err(); cerr != nil {
		return core.Canceled, fmt.Errorf("jobonce: pgstore: stopped by the caller's context: %w (%w)", cerr, err)
	}
	return core.Unavailable, fmt.Errorf("%w: %w", core.ErrStoreUnavailable, err)
}
