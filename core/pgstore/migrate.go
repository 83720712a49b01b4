package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Migrate creates the keys table and its expiry index when they are
// missing, and adds the columns an older table lacks. It is idempotent,
// and safe to run from several processes at once and while workers use the
// table. A table that is up to date is not locked. A lock wait that would
// hold back claims is bounded by Config.MigrateLockTimeout; then Migrate
// returns an error matching ErrMigrationBlocked. cfg may be nil for the
// defaults. docs/postgresql.md explains migrations during a deploy.
func Migrate(ctx context.Context, pool *pgxpool.Pool, cfg *Config) error {
	if pool == nil {
		return errors.New("jobonce: pgstore: Migrate: pool is nil")
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	s := &Store{pool: pool, cfg: c, sql: newStatements(&c), table: tableName(&c)}
	return s.migrate(ctx)
}

// MigrationSQL returns the SQL that Migrate runs for cfg, for migration
// tools of your own. Each statement is idempotent. Adding a column takes an
// ACCESS EXCLUSIVE lock on the table even when the column exists, and
// building the index a SHARE lock. So set a lock_timeout when you run it
// while workers use the table. cfg may be nil for the defaults.
func MigrationSQL(cfg *Config) (string, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return "", err
	}
	m := newStatements(&c).migrate
	return m.table + "\n" + m.fence + "\n" + m.index, nil
}

// migrationState is what the catalog says of the table (migrate_state.sql).
type migrationState struct {
	schema              string
	table, fence, index bool
	invalidIndex        bool // an INVALID index a failed concurrent build left
}

func (m *migrationState) upToDate() bool { return m.table && m.fence && m.index }

// migrationStep is one statement of a migration, with the lock it waits for.
type migrationStep struct {
	what      string   // what it does, before the table's name: "adding column fence to"
	lock      string   // the lock it waits for, for messages
	sql       string   // "" for the advisory lock
	conflicts []string // lock modes on the table that hold it back; nil for the advisory lock
	inTx      bool     // runs in the migration's transaction, not on its own
	gaveUp    string   // what giving up meant, when not that claims queued and nothing changed
}

// Lock modes in pg_locks that conflict with ACCESS EXCLUSIVE, and with SHARE
// (those of the transactions a concurrent index build waits out).
var (
	conflictsAccessExclusive = []string{"AccessShareLock", "RowShareLock", "RowExclusiveLock", "ShareUpdateExclusiveLock",
		"ShareLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock"}
	conflictsShare = []string{"RowExclusiveLock", "ShareUpdateExclusiveLock", "ShareRowExclusiveLock",
		"ExclusiveLock", "AccessExclusiveLock"}
)

// steps returns the statements that bring a table in state m up to date:
// first those of one short transaction (the table, with its index while no
// one else can see it, or the column), then a concurrent build of the index
// on a table that exists, each statement on its own.
func (s *Store) steps(m *migrationState) []migrationStep {
	var steps []migrationStep
	index := pgx.Identifier{s.cfg.Table + indexSuffix}.Sanitize()
	if !m.table {
		return append(steps,
			migrationStep{what: "creating table", lock: "a lock on its name", sql: s.sql.migrate.table, inTx: true},
			migrationStep{what: "creating table", lock: "a lock on its name", sql: s.sql.migrate.index, inTx: true})
	}
	if !m.fence {
		steps = append(steps, migrationStep{what: "adding column fence to", lock: "an AccessExclusiveLock on it",
			sql: s.sql.migrate.fence, conflicts: conflictsAccessExclusive, inTx: true})
	}
	if m.invalidIndex {
		drop := strings.ReplaceAll(s.sql.migrate.indexDrop, "{qualified_index}",
			pgx.Identifier{m.schema, s.cfg.Table + indexSuffix}.Sanitize())
		steps = append(steps, migrationStep{what: "dropping the invalid index " + index + " an earlier build left on",
			lock: "the end of the transactions using it", sql: drop, conflicts: conflictsAccessExclusive})
	}
	if !m.index {
		steps = append(steps, migrationStep{what: "building index " + index + " concurrently on",
			lock: "the end of the transactions writing to it or older than the build",
			sql:  s.sql.migrate.indexConcurrently, conflicts: conflictsShare,
			gaveUp: "claims on the table do not wait for the build, but it gave up; an invalid index it left is dropped and built again by the next migration"})
	}
	return steps
}

// migrate brings the table up to date on a connection of its own. It holds
// the advisory lock that serialises migrations of the table, the session's,
// from the catalog read that finds work to do until the index is built, and
// bounds every lock wait with lock_timeout on that connection. The table and
// the column change in one short transaction at READ COMMITTED whatever the
// pool's default; the index is built concurrently after it commits, so no
// claim waits for the build, which only ctx bounds.
func (s *Store) migrate(ctx context.Context) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("jobonce: pgstore: migrate %s: %w", s.table, err)
	}
	waiting, lockName, err := s.migrateOn(ctx, conn.Conn())
	if err != nil || lockName != "" && s.unlock(ctx, conn.Conn(), lockName) != nil {
		// Closing the connection ends its session: the advisory lock and
		// lock_timeout go with it.
		_ = conn.Conn().Close(ctx)
	}
	conn.Release()
	if err == nil {
		return nil
	}
	if lockTimedOut(err) && waiting != nil {
		return s.blocked(ctx, waiting, lockName, err)
	}
	return fmt.Errorf("jobonce: pgstore: migrate %s: %w", s.table, err)
}

// migrateOn is migrate on conn. It returns the step whose lock it waited
// for last, and the advisory lock's table name once it may hold that lock.
func (s *Store) migrateOn(ctx context.Context, conn *pgx.Conn) (waiting *migrationStep, lockName string, err error) {
	m, err := s.migrationState(ctx, conn)
	if err != nil || m.upToDate() {
		return nil, "", err
	}
	lockName = pgx.Identifier{m.schema, s.cfg.Table}.Sanitize()
	waiting = &migrationStep{what: "waiting for the advisory lock that serialises migrations of",
		lock: "it (another process is migrating the table)"}
	timeout := strconv.FormatInt(ceilMillis(s.cfg.MigrateLockTimeout), 10) + "ms"
	if _, err := conn.Exec(ctx, s.sql.migrate.lock, timeout, lockName); err != nil {
		return waiting, lockName, err
	}
	// Another process may have migrated the table while this one waited.
	if m, err = s.migrationState(ctx, conn); err != nil {
		return waiting, lockName, err
	}
	steps := s.steps(&m)
	var inTx []migrationStep
	for len(steps) > 0 && steps[0].inTx {
		inTx, steps = append(inTx, steps[0]), steps[1:]
	}
	if len(inTx) > 0 {
		opts := pgx.TxOptions{IsoLevel: pgx.ReadCommitted}
		err = pgx.BeginTxFunc(ctx, conn, opts, func(tx pgx.Tx) error {
			for _, step := range inTx {
				waiting = &step
				if _, err := tx.Exec(ctx, step.sql); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return waiting, lockName, err
		}
	}
	if len(steps) > 0 {
		// A concurrent build holds back no claim, but waits out every
		// transaction older than it in the database, however long: only
		// ctx bounds it, so long transactional jobs cannot fail every
		// deploy's migration.
		if _, err := conn.Exec(ctx, "SET lock_timeout = 0"); err != nil {
			return waiting, lockName, err
		}
	}
	for _, step := range steps {
		waiting = &step
		if _, err := conn.Exec(ctx, step.sql); err != nil {
			return waiting, lockName, err
		}
	}
	return waiting, lockName, nil
}

// unlock releases the advisory lock and resets lock_timeout on conn
// (migrate_unlock.sql).
func (s *Store) unlock(ctx context.Context, conn *pgx.Conn, lockName string) error {
	_, err := conn.Exec(ctx, s.sql.migrate.unlock, lockName)
	return err
}

func (s *Store) migrationState(ctx context.Context, conn *pgx.Conn) (migrationState, error) {
	var m migrationState
	err := conn.QueryRow(ctx, s.sql.migrate.state, s.table, s.cfg.Table+indexSuffix, s.cfg.Schema).
		Scan(&m.schema, &m.table, &m.fence, &m.index, &m.invalidIndex)
	return m, err
}

// blocked returns the error of a migration whose wait for step's lock timed
// out (cause), naming the transactions in its way.
func (s *Store) blocked(ctx context.Context, step *migrationStep, lockName string, cause error) error {
	holders, err := s.holders(ctx, step, lockName)
	var who string
	switch {
	case err != nil:
		who = fmt.Sprintf("what holds it could not be read (%v): see pg_locks; run the migration again once it is free", err)
	case len(holders) == 0:
		who = "no transaction holds it any more: run the migration again"
	case len(holders) == 1:
		who = "held by " + holders[0] + ": run the migration again when that transaction ends"
	default:
		who = "held by " + strings.Join(holders, ", ") + ": run the migration again when those transactions end"
	}
	gaveUp := step.gaveUp
	if gaveUp == "" {
		gaveUp = "claims on the table queue behind the migration while it waits, so it gave up and changed nothing"
	}
	return fmt.Errorf("%w: %s %s needs %s, not granted within %s (Config.MigrateLockTimeout; %s); %s: %w",
		ErrMigrationBlocked, step.what, s.table, step.lock, s.cfg.MigrateLockTimeout, gaveUp, who, cause)
}

// holders describes the backends that hold, or wait before the migration
// for, a lock in the way of step (migrate_holders.sql).
func (s *Store) holders(ctx context.Context, step *migrationStep, lockName string) ([]string, error) {
	rows, err := s.pool.Query(ctx, s.sql.migrate.holders, s.table, step.conflicts, lockName)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var (
			pid     int32
			mode    string
			granted bool
			state   string
			since   pgtype.Timestamptz
			age     int64
		)
		if err := rows.Scan(&pid, &mode, &granted, &state, &since, &age); err != nil {
			return nil, err
		}
		out = append(out, describeHolder(pid, mode, granted, state, since, age))
	}
	return out, rows.Err()
}

// describeHolder says who holds a lock: "pid 42 (RowExclusiveLock, idle in
// transaction, in a transaction open since 2026-12-01T10:00:00Z, for 1m2s)".
func describeHolder(pid int32, mode string, granted bool, state string, since pgtype.Timestamptz, age int64) string {
	who := "a prepared transaction"
	if pid != 0 {
		who = "pid " + strconv.Itoa(int(pid))
	}
	parts := []string{mode}
	if !granted {
		parts[0] = "waiting for " + mode + ", queued before the migration"
	}
	if state != "" {
		parts = append(parts, state)
	}
	if since.Valid {
		parts = append(parts, fmt.Sprintf("in a transaction open since %s, for %s",
			since.Time.UTC().Format(time.RFC3339), fromMicros(age).Round(100*time.Millisecond)))
	}
	return who + " (" + strings.Join(parts, ", ") + ")"
}
