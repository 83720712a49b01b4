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
// that core.NewTxGuard drives: it records req.Key as done in tx inside a
// savepoint with lock_timeout set to Config.LockTimeout (the caller's
// lock_timeout is restored afterwards), in one round trip; taking over an
// expired row takes a second. A key held by another transaction that does
// not commit within LockTimeout is reported running, with Config.RetryAfter
// as its remaining time; on every answer but StateClaimed, and on an error,
// tx is left as it was and usable. The record is kept for req.Retention on
// the database clock. A recorded key's fence comes from the database clock
// too, and is greater than the fence of the expired row (a lapsed claim, an
// old record) it replaces.
// tx should be READ COMMITTED, as BeginTx begins it: in a REPEATABLE READ
// or SERIALIZABLE transaction, a key another transaction recorded after
// tx's snapshot cannot be read as done, so it is reported running (its
// serialization failure, like a deadlock, undone to the savepoint) and
// only a new transaction finds it done.
// The transaction's id, which CommitTx reads a lost commit's fate by, is
// kept on tx's connection: CommitTx and RollbackTx drop it, and a caller
// that ends tx itself leaves at most that one entry per connection, which
// the connection's next recorded transaction replaces and which goes with
// the connection.
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

// BeginTx implements driver.TxStore: it begins a READ COMMITTED
// transaction on the Store's pool, whatever the connection's
// default_transaction_isolation, so that a copy waiting for another
// copy's record reads it as done once it commits (at REPEATABLE READ it
// would fail to serialize). The job's own statements run in it at READ
// COMMITTED too: an effect that must not act on rows changed since it read
// them locks them (SELECT ... FOR UPDATE) or checks them in its UPDATE's
// WHERE clause, as at PostgreSQL's default level.
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

// CommitTx implements driver.TxStore. A commit whose answer is lost or late
// (the connection dies, or goes silent, while COMMIT runs, or ctx ends
// first) may have gone through: CommitTx then asks the database, on
// another connection and within a bound of its own (5s, since ctx may have
// ended), whether the transaction committed, waiting while its COMMIT is
// still running, and returns nil if it did. A transaction whose backend is
// idle in transaction never got its COMMIT (the network partitioned while
// it was on its way): CommitTx ends that backend (pg_terminate_backend),
// which rolls the transaction back and frees its key at once, rather than
// leaving the key locked until the server notices the dead connection.
// That needs the pool's role to be a superuser or a member of
// pg_signal_backend, or the backend's own role (as it is when one pool
// serves both); the error says so when it is not.
//
// A commit the database has written reads as committed even while its
// backend still waits for a synchronous standby (synchronous_commit
// remote_write, on or remote_apply, with synchronous_standby_names set):
// nil then means durable on the primary, not yet confirmed by the standby.
//
// It returns the commit's error when the transaction did not commit or
// the database cannot tell within the bound. The read-back needs the
// transaction's id: RecordTx read it when it recorded a key in tx; for a
// transaction it recorded no key in (Job.Unguarded, a shadow copy that
// runs anyway), CommitTx reads it first, in one more round trip. A
// transaction that has written nothing has no id and nothing to read back.
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

// RollbackTx implements driver.TxStore; after a commit it does nothing.
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
