package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobonce/jobonce/core/driver"
)

var _ driver.TxStore[pgx.Tx] = (*Store)(nil)

// rollbackTimeout bounds the statement that undoes a failed record attempt,
// which runs even when the caller's context is done.
const rollbackTimeout = 5 * time.Second

// RecordTx implements driver.TxStore for pgx.Tx, the transactional mode
// that core.NewTxGuard drives. It records req.Key as done in tx, kept for
// req.Retention, in one round trip; taking over an expired row takes a
// second. A key that another transaction holds past Config.LockTimeout is
// reported running, with Config.RetryAfter as its remaining time. On every
// answer but StateClaimed, and on an error, tx is left usable as it was.
// Begin tx READ COMMITTED, as BeginTx does: at a stricter level, a key
// recorded after tx's snapshot is reported running, not done.
// docs/postgresql.md explains the savepoint and the isolation.
func (s *Store) RecordTx(ctx context.Context, tx pgx.Tx, req driver.RecordRequest) (driver.ClaimReply, error) {
	if tx == nil {
		return driver.ClaimReply{}, errors.New("jobonce: pgstore: RecordTx: tx is nil")
	}
	if req.Retention < time.Millisecond {
		return driver.ClaimReply{}, fmt.Errorf("jobonce: pgstore: RecordRequest.Retention must be at least 1ms, got %s", req.Retention)
	}
	// The first attempt only inserts (tx_insert.sql), which is all a key
	// without a row needs; a key whose row has expired, or vanished between
	// the statements, goes round again with tx_record.sql, which takes an
	// expired row over.
	key := any([]byte(req.Key))
	for attempt := 0; ; attempt++ {
		r := newRecordBatch(&s.sql, attempt > 0, key, req, s.lockTimeoutFor(ctx, 1))
		br := tx.SendBatch(ctx, &r.batch)
		err := r.read(br)
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
			_, rerr := tx.Exec(rctx, s.sql.txRollback)
			cancel()
			if (lockTimedOut(err) || lookAgain(err)) && rerr == nil {
				return driver.ClaimReply{State: driver.StateRunning, Remaining: s.cfg.RetryAfter}, nil
			}
			return driver.ClaimReply{}, errors.Join(s.fail(ctx, err), rerr)
		}
		st := &r.state
		switch {
		case r.fence != 0:
			keepXid(tx, r.xid)
			return driver.ClaimReply{State: driver.StateClaimed, Fence: r.fence}, nil
		case st.found && st.live && st.done:
			return driver.ClaimReply{State: driver.StateDone, Fingerprint: string(st.fingerprint), Remaining: fromMicros(st.remaining)}, nil
		case st.found && st.live:
			remaining := max(time.Duration(st.remaining)*time.Microsecond, s.cfg.LockTimeout)
			return driver.ClaimReply{State: driver.StateRunning, Fingerprint: string(st.fingerprint), Remaining: remaining}, nil
		case attempt == claimAttempts:
			// The row kept expiring or vanishing between the statements.
			return driver.ClaimReply{State: driver.StateRunning, Remaining: s.cfg.LockTimeout}, nil
		}
	}
}

// BeginTx implements driver.TxStore. It begins a READ COMMITTED transaction
// on the Store's pool, whatever the connection's default isolation, so a
// copy waiting on another copy's record reads it as done once it commits.
// The job's statements run at READ COMMITTED too.
func (s *Store) BeginTx(ctx context.Context) (pgx.Tx, error) {
	return s.pool.BeginTx(ctx, readCommitted)
}

// readBackTimeout bounds how long CommitTx, after a commit that failed
// without an answer, takes to find out whether the transaction committed:
// the commit's own context has often ended by then (a late answer), so the
// read-back runs under a bound of its own.
const readBackTimeout = 5 * time.Second

// codeInsufficientPrivilege is the SQLSTATE of a pg_terminate_backend the
// role may not run.
const codeInsufficientPrivilege = "42501"

// endWait is how long tx_end.sql waits for a terminated backend to exit.
const endWait = 2 * time.Second

// CommitTx implements driver.TxStore. When a commit's answer is lost or
// late, CommitTx asks the database, on another connection and within 5s,
// whether the transaction committed, and returns nil if it did. A backend
// left idle in transaction never got its COMMIT: CommitTx ends it
// (pg_terminate_backend), which rolls it back and frees its key. That
// needs the pool's role to be the backend's own, a superuser or a member of
// pg_signal_backend; the error says so when it is not.
//
// Otherwise it returns the commit's error: the transaction did not commit,
// or the database could not tell within 5s. Under synchronous replication,
// nil means durable on the primary, perhaps not yet on the standby.
// docs/postgresql.md explains lost COMMIT answers.
func (s *Store) CommitTx(ctx context.Context, tx pgx.Tx) error {
	xid, recorded := takeXid(tx)
	if !recorded {
		var id *string // NULL: the transaction has written nothing
		if qerr := tx.QueryRow(ctx, s.sql.txID).Scan(&id); qerr == nil && id != nil {
			xid, recorded = *id, true
		}
	}
	err := tx.Commit(ctx)
	if err == nil || !recorded {
		return err
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readBackTimeout)
	defer cancel()
	return s.readBack(rctx, xid, err)
}

// xidKey is the key, in the custom data of a transaction's connection, of
// the transaction's id as RecordTx read it.
const xidKey = "jobonce.pgstore.xid"

// recordedXid is the id of transaction tx. tx is nil once CommitTx or
// RollbackTx has taken the id.
type recordedXid struct {
	tx  pgx.Tx
	xid string
}

// connData returns the custom data of tx's connection, or nil when tx has
// no connection.
func connData(tx pgx.Tx) map[string]any {
	c := tx.Conn()
	if c == nil || c.PgConn() == nil {
		return nil
	}
	return c.PgConn().CustomData()
}

// keepXid keeps xid as tx's id on tx's connection, replacing the id of the
// connection's previous recorded transaction.
func keepXid(tx pgx.Tx, xid string) {
	data := connData(tx)
	if data == nil {
		return // CommitTx reads the id itself
	}
	if r, ok := data[xidKey].(*recordedXid); ok {
		r.tx, r.xid = tx, xid
		return
	}
	data[xidKey] = &recordedXid{tx: tx, xid: xid}
}

// takeXid returns the id keepXid kept for tx, and drops it.
func takeXid(tx pgx.Tx) (string, bool) {
	r, ok := connData(tx)[xidKey].(*recordedXid)
	if !ok || r.tx != tx {
		return "", false // none, or another transaction's: a savepoint shares its parent's connection
	}
	r.tx = nil
	return r.xid, true
}

// readBack returns nil if the transaction xid committed, after its commit
// failed with err, or err: when it aborted, or when ctx ends before the
// database can tell. An orphaned backend (idle in transaction) is ended
// first.
func (s *Store) readBack(ctx context.Context, xid string, err error) error {
	var lastErr error // the last read-back failure, for the error that says why it could not tell
	for pause := 10 * time.Millisecond; ; pause = min(2*pause, 200*time.Millisecond) {
		var status *string
		if qerr := s.pool.QueryRow(ctx, s.sql.txStatus, xid).Scan(&status); qerr != nil {
			lastErr = qerr
		} else {
			switch {
			case status == nil: // too old to tell
				return err
			case *status == "committed":
				return nil
			case *status == "aborted":
				return err
			}
			ended, eerr := s.endOrphan(ctx, xid)
			if eerr != nil {
				return errors.Join(err, eerr)
			}
			if ended {
				continue // its fate is settled: read it
			}
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			if lastErr != nil {
				return fmt.Errorf("%w (and whether it committed could not be read: %w)", err, lastErr)
			}
			return fmt.Errorf("%w (and the transaction was still committing after %s)", err, readBackTimeout)
		}
	}
}

// endOrphan terminates the backend of transaction xid if it is idle in
// transaction, and reports whether it did and the backend exited.
func (s *Store) endOrphan(ctx context.Context, xid string) (bool, error) {
	var pid int32
	var exited bool
	err := s.pool.QueryRow(ctx, s.sql.txEnd, xid, endWait.Milliseconds()).Scan(&pid, &exited)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case sqlState(err) == codeInsufficientPrivilege:
		return false, fmt.Errorf("jobonce: pgstore: CommitTx: the transaction's COMMIT was lost and its backend still holds it, and its key, until the server ends it; the pool's role may not terminate it (grant the role pg_signal_backend, and set idle_in_transaction_session_timeout and tcp_keepalives_idle to bound it): %w", err)
	case err != nil:
		return false, nil // not ended: the next read-back tries again
	}
	return exited, nil
}

// RollbackTx implements driver.TxStore. After a commit it does nothing.
func (s *Store) RollbackTx(ctx context.Context, tx pgx.Tx) error {
	takeXid(tx)
	if err := tx.Rollback(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return err
	}
	return nil
}

// recordBatch is the batch of one RecordTx attempt, with its arguments and
// the targets of its replies, in one allocation.
type recordBatch struct {
	batch    pgx.Batch
	takeover bool // tx_lock_timeout.sql and tx_record.sql, not tx_insert.sql
	queries  [5]pgx.QueuedQuery
	queued   [5]*pgx.QueuedQuery
	args     [5]any

	fence int64  // 0 when the key was not recorded
	xid   string // the id of the record's transaction
	state txState
	dst   [5]any // scan targets
}

// noFingerprint is the argument for an empty fingerprint: an empty bytea,
// not NULL.
var noFingerprint any = []byte{}

// newRecordBatch queues, in a savepoint, the record's statement (tx_insert.sql
// on a first attempt, tx_lock_timeout.sql and tx_record.sql on a takeover)
// and tx_state.sql. key is req.Key as a []byte.
func newRecordBatch(sql *statements, takeover bool, key any, req driver.RecordRequest, lockTimeout string) *recordBatch {
	r := &recordBatch{takeover: takeover}
	n := 0
	queue := func(query string, args []any) {
		r.queries[n] = pgx.QueuedQuery{SQL: query, Arguments: args}
		r.queued[n] = &r.queries[n]
		n++
	}
	fp := noFingerprint
	if req.Fingerprint != "" {
		fp = []byte(req.Fingerprint)
	}
	r.args = [5]any{key, fp, req.Retention.Microseconds(), lockTimeout, key}
	queue(sql.txSavepoint, nil)
	if takeover {
		queue(sql.txLockTimeout, r.args[3:4])
		queue(sql.txRecord, r.args[0:3])
	} else {
		queue(sql.txInsert, r.args[0:4])
	}
	queue(sql.txState, r.args[4:5])
	queue(sql.txRelease, nil)
	r.batch.QueuedQueries = r.queued[:n]
	return r
}

// read reads the replies of the batch, in order, into r.
func (r *recordBatch) read(br pgx.BatchResults) error {
	if _, err := br.Exec(); err != nil { // savepoint
		return err
	}
	if r.takeover {
		if _, err := br.Exec(); err != nil { // lock_timeout
			return err
		}
	}
	r.dst[0], r.dst[1] = &r.fence, &r.xid
	if err := scanOne(br, r.dst[:2]); err != nil {
		return err
	}
	st := &r.state
	r.dst = [5]any{&st.found, &st.done, &st.fingerprint, &st.remaining, &st.live}
	if err := scanOne(br, r.dst[:]); err != nil {
		return err
	}
	_, err := br.Exec() // release savepoint
	return err
}

// scanOne scans the next result of br, at most one row, into dst; no row
// leaves dst as it was.
func scanOne(br pgx.BatchResults, dst []any) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	if rows.Next() {
		err = rows.Scan(dst...)
	}
	rows.Close()
	if err != nil {
		return err
	}
	return rows.Err()
}

// txState is a key's row as tx_state.sql reads it.
type txState struct {
	found, done, live bool
	fingerprint       []byte
	remaining         int64 // microseconds
}
