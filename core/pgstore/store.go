package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobonce/jobonce/core/driver"
)

// Store keeps jobonce claims and done markers in a PostgreSQL table. It
// implements driver.Store, driver.BatchStore and driver.TxStore (for
// core.TxGuard). It is safe for concurrent use.
type Store struct {
	pool        *pgxpool.Pool
	cfg         Config
	sql         statements
	table       string // quoted name, for messages
	lockTimeout string // cfg.LockTimeout as a lock_timeout value
	channel     string // the channel awaited claims notify (see notify.go)
}

var (
	_ driver.BatchStore = (*Store)(nil)
	_ driver.Notifier   = (*Store)(nil)
	_ driver.ReadyStore = (*Store)(nil)
)

// claimAttempts bounds how often a claim is re-run when the key's row changed
// under the statement's snapshot (a race with a concurrent commit).
const claimAttempts = 4

// New returns a Store on pool. cfg may be nil for the defaults. With
// Config.Migrate, New runs Migrate first. New reads the table, so a
// database it cannot reach within ctx gives an error. A missing table or
// column gives an error matching ErrNotMigrated that names it. An invalid
// Config field gives an error naming it.
func New(ctx context.Context, pool *pgxpool.Pool, cfg *Config) (*Store, error) {
	if pool == nil {
		return nil, errors.New("jobonce: pgstore: New: pool is nil")
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Store{
		pool:        pool,
		cfg:         c,
		sql:         newStatements(&c),
		table:       tableName(&c),
		lockTimeout: strconv.FormatInt(ceilMillis(c.LockTimeout), 10) + "ms",
	}
	if c.Migrate {
		if err := s.migrate(ctx); err != nil {
			return nil, err
		}
	}
	if _, err := pool.Exec(ctx, s.sql.check); err != nil {
		if err := s.wrap(err); errors.Is(err, ErrNotMigrated) {
			return nil, err
		}
		return nil, fmt.Errorf("jobonce: pgstore: New: checking table %s: %w", s.table, err)
	}
	schema := c.Schema
	if err := pool.QueryRow(ctx, s.sql.tableSchema, s.table).Scan(&schema); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("jobonce: pgstore.New: reading the schema of table %s: %w", s.table, err)
	}
	s.channel = channelName(schema, c.Table)
	return s, nil
}

// Ready implements driver.ReadyStore, for core.Guard.Ready. Within ctx, it
// runs the statement New checks the table with, which reads no rows. A
// table dropped since New gives an error matching ErrNotMigrated.
func (s *Store) Ready(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, s.sql.check); err != nil {
		return s.fail(ctx, err)
	}
	return nil
}

func uuid(t driver.Token) pgtype.UUID { return pgtype.UUID{Bytes: t, Valid: true} }

// checkDuration rejects a lease or retention under 1ms with an error naming
// field. Every jobonce store keeps at least whole milliseconds (Redis can
// keep no less), so a request means the same on each of them.
func checkDuration(field string, d time.Duration) error {
	if d < time.Millisecond {
		return fmt.Errorf("jobonce: pgstore: %s must be at least 1ms, got %s", field, d)
	}
	return nil
}

// fromMicros converts microseconds read from the database to a Duration,
// saturating at the longest Duration.
func fromMicros(us int64) time.Duration {
	const most = int64(time.Duration(math.MaxInt64) / time.Microsecond)
	return time.Duration(min(max(us, 0), most)) * time.Microsecond
}

// Claim implements driver.Store: one statement claims the key or reads its
// state. A key that an uncommitted transaction holds past
// Config.LockTimeout is reported running. A key already held by req.Token
// (the same request sent again) is reported claimed. A lease under 1ms
// gives an error.
func (s *Store) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimReply, error) {
	return s.claim(ctx, req, 1)
}

// claim is Claim for one of share claims made one after the other under
// ctx: its lock wait is its share of the time left (see lockTimeoutFor).
func (s *Store) claim(ctx context.Context, req driver.ClaimRequest, share int) (driver.ClaimReply, error) {
	if err := checkDuration("ClaimRequest.Lease", req.Lease); err != nil {
		return driver.ClaimReply{}, err
	}
	inReadCommitted := false
	for attempt := 1; ; attempt++ {
		reply, settled, err := s.claimOnce(ctx, req, share, inReadCommitted)
		switch {
		case lockTimedOut(err):
			return driver.ClaimReply{State: driver.StateRunning, Remaining: s.cfg.RetryAfter}, nil
		case lookAgain(err) && ctx.Err() == nil:
			// Rolled back for a concurrent transaction (the connection's
			// default isolation is stricter, or a deadlock): nothing holds;
			// look again at READ COMMITTED. A row it read before its commit
			// failed (SERIALIZABLE checks at commit) does not hold either.
			inReadCommitted, settled = true, false
		case err != nil:
			return driver.ClaimReply{}, s.fail(ctx, err)
		}
		if settled {
			return reply, nil
		}
		if attempt == claimAttempts {
			// The key keeps changing hands: report it busy rather than loop.
			return driver.ClaimReply{State: driver.StateRunning}, nil
		}
	}
}

func (s *Store) claimArgs(ctx context.Context, req *driver.ClaimRequest, share int) []any {
	return []any{[]byte(req.Key), uuid(req.Token), []byte(req.Fingerprint), req.Lease.Microseconds(), s.lockTimeoutFor(ctx, share)}
}

// lockTimeoutFor returns the lock_timeout of one of share statements sent
// one after the other under ctx: Config.LockTimeout, shortened to its share
// of three quarters of the time left before ctx's deadline, so that keys
// held by open transactions are answered as running by the database before
// the caller's deadline ends the call.
func (s *Store) lockTimeoutFor(ctx context.Context, share int) string {
	deadline, ok := ctx.Deadline()
	if !ok {
		return s.lockTimeout
	}
	left := time.Until(deadline)
	bound := (left - left/4) / time.Duration(max(share, 1))
	if bound >= s.cfg.LockTimeout {
		return s.lockTimeout
	}
	return strconv.FormatInt(max(ceilMillis(bound), 1), 10) + "ms"
}

// claimOnce runs the claim statement once, in a READ COMMITTED transaction
// of its own when inReadCommitted (see send). settled is false when it
// returned no row and must run again.
func (s *Store) claimOnce(ctx context.Context, req driver.ClaimRequest, share int, inReadCommitted bool) (driver.ClaimReply, bool, error) {
	if inReadCommitted {
		return s.claimInReadCommitted(ctx, &req, share)
	}
	rows, err := s.pool.Query(ctx, s.sql.claim, s.claimArgs(ctx, &req, share)...)
	if err != nil {
		return driver.ClaimReply{}, false, err
	}
	return scanClaim(rows)
}

// claimInReadCommitted runs the claim statement once in a READ COMMITTED
// transaction of its own (see send).
func (s *Store) claimInReadCommitted(ctx context.Context, req *driver.ClaimRequest, share int) (reply driver.ClaimReply, settled bool, err error) {
	b := newBatch(true)
	b.Queue(s.sql.claim, s.claimArgs(ctx, req, share)...)
	err = s.send(ctx, b, true, func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		reply, settled, err = scanClaim(rows)
		return err
	})
	return reply, settled, err
}

func scanClaim(rows pgx.Rows) (driver.ClaimReply, bool, error) {
	defer rows.Close()
	var (
		reply         driver.ClaimReply
		settled       bool
		claimed, done bool
		fingerprint   []byte
		result        []byte
		remaining     int64
		fence         int64
	)
	if rows.Next() {
		if err := rows.Scan(&claimed, &done, &fingerprint, &result, &remaining, &fence); err != nil {
			return reply, false, err
		}
		settled = true
		switch {
		case claimed:
			reply = driver.ClaimReply{State: driver.StateClaimed, Fence: fence}
		case done:
			reply = driver.ClaimReply{State: driver.StateDone, Fingerprint: string(fingerprint), Result: result,
				Remaining: fromMicros(remaining)}
		default:
			reply = driver.ClaimReply{State: driver.StateRunning, Fingerprint: string(fingerprint),
				Remaining: fromMicros(remaining), Fence: fence}
		}
	}
	rows.Close()
	return reply, settled, rows.Err()
}

// Extend implements driver.Store. It returns driver.ErrLeaseLost when token
// does not hold a live claim on key. A lease under 1ms gives an error.
func (s *Store) Extend(ctx context.Context, key string, token driver.Token, lease time.Duration) error {
	if err := checkDuration("Extend lease", lease); err != nil {
		return err
	}
	tag, err := s.exec(ctx, s.sql.extend, []byte(key), uuid(token), lease.Microseconds())
	if err != nil {
		return s.fail(ctx, err)
	}
	if tag.RowsAffected() == 0 {
		return driver.ErrLeaseLost
	}
	return nil
}

func (s *Store) completeArgs(req *driver.CompleteRequest) []any {
	return []any{[]byte(req.Key), uuid(req.Token), []byte(req.Fingerprint), req.Result, req.Retention.Microseconds(), req.Fence, s.channel}
}

// Complete implements driver.Store: the claim becomes a done row, kept for
// req.Retention with its fingerprint and result. A nil result reads back
// nil, an empty one empty. A complete sent again by the same claim finds
// its own row and returns nil. It returns driver.ErrLeaseLost when
// req.Token does not hold a live claim. A retention under 1ms gives an
// error.
func (s *Store) Complete(ctx context.Context, req driver.CompleteRequest) error {
	if err := checkDuration("CompleteRequest.Retention", req.Retention); err != nil {
		return err
	}
	tag, err := s.exec(ctx, s.sql.complete, s.completeArgs(&req)...)
	if err != nil {
		return s.fail(ctx, err)
	}
	if tag.RowsAffected() == 0 {
		return driver.ErrLeaseLost
	}
	return nil
}

// Release implements driver.Store: the claim held by token expires at once,
// so the key is free. It returns driver.ErrLeaseLost when token does not
// hold a live claim. It never touches another token's claim or a done row.
func (s *Store) Release(ctx context.Context, key string, token driver.Token) error {
	tag, err := s.exec(ctx, s.sql.release, []byte(key), uuid(token), s.channel)
	if err != nil {
		return s.fail(ctx, err)
	}
	if tag.RowsAffected() == 0 {
		return driver.ErrLeaseLost
	}
	return nil
}

// readCommitted is the isolation the store's statements are written for:
// a row another transaction commits while a statement waits for it is read
// as committed. At REPEATABLE READ or SERIALIZABLE, the level a role's
// default_transaction_isolation may set, such a statement fails to
// serialize instead (SQLSTATE 40001): nothing it did holds, and it runs
// again in a transaction that begins at READ COMMITTED (see send). A
// statement that does not fail behaves the same at every level, and costs
// no more than one statement does.
var readCommitted = pgx.TxOptions{IsoLevel: pgx.ReadCommitted}

// newBatch returns a batch for send, which begins a transaction at READ
// COMMITTED when inReadCommitted. Queue the statements to it.
func newBatch(inReadCommitted bool) *pgx.Batch {
	b := &pgx.Batch{}
	if inReadCommitted {
		b.BeginTx(readCommitted)
	}
	return b
}

// send sends b, made by newBatch(inReadCommitted), in one round trip; read
// reads the results of the statements queued to it, in order. Without
// inReadCommitted they run in the implicit transaction of a batch, at the
// connection's default isolation. With it, send queues commit.sql after
// them, and a transaction that did not commit (a statement failed, or ctx
// ended) is rolled back, within rollbackTimeout, before its connection goes
// back to the pool.
func (s *Store) send(ctx context.Context, b *pgx.Batch, inReadCommitted bool, read func(pgx.BatchResults) error) error {
	if !inReadCommitted {
		br := s.pool.SendBatch(ctx, b)
		err := read(br)
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		return err
	}
	b.Queue(s.sql.commit)
	br := s.pool.SendBatch(ctx, b)
	_, err := br.Exec() // begin
	if err == nil {
		err = read(br)
	}
	if err == nil {
		_, err = br.Exec() // commit
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	tx := br.Tx()
	if err == nil {
		_ = tx.Rollback(ctx) // committed: only gives the connection back
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	_ = tx.Rollback(rctx) // a connection it cannot roll back is closed
	cancel()
	return err
}

// exec runs one statement with args and returns its command tag. A
// statement rolled back for a concurrent transaction (a serialization
// failure, a deadlock) changed nothing and runs again in a READ COMMITTED
// transaction of its own, at most claimAttempts times in all.
func (s *Store) exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := s.pool.Exec(ctx, sql, args...)
	for attempt := 2; lookAgain(err) && attempt <= claimAttempts && ctx.Err() == nil; attempt++ {
		tag, err = s.execInReadCommitted(ctx, sql, args)
	}
	return tag, err
}

// execInReadCommitted runs one statement with args in a READ COMMITTED
// transaction of its own (see send) and returns its command tag.
func (s *Store) execInReadCommitted(ctx context.Context, sql string, args []any) (tag pgconn.CommandTag, err error) {
	b := newBatch(true)
	b.Queue(sql, args...)
	err = s.send(ctx, b, true, func(br pgx.BatchResults) (err error) {
		tag, err = br.Exec()
		return err
	})
	return tag, err
}
