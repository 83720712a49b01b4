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

// Migrate creates the keys table and its expiry index described by cfg when
// they are missing, and adds the columns that a table created by an earlier
// version lacks. It is idempotent and safe to run from several processes at
// once, and while workers use the table: it reads the catalog first and
// takes no lock on a table that is up to date, and each lock a change waits
// for is bounded by Config.MigrateLockTimeout, after which it returns an
// error matching ErrMigrationBlocked that names the lock and its holders.
// cfg may be nil for the defaults.
func Migrate(ctx context.Context, pool *pgxpool.Pool, cfg *Config) error {
	if pool == nil {
		return errors.New("jobonce: pgstore.Migrate: pool is nil")
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	s := &Store{pool: pool, cfg: c, sql: newStatements(&c), table: tableName(&c)}
	return s.migrate(ctx)
}

// MigrationSQL returns the SQL that Migrate runs for cfg, for those who apply
// migrations with their own tools: every statement, each idempotent. Adding
// a column takes an ACCESS EXCLUSIVE lock on the table even when the column
// exists, and building the index a SHARE lock, so run it with a lock_timeout
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
}

func (m *migrationState) upToDate() bool { return m.table && m.fence && m.index }

// migrationStep is one statement of a migration, with the lock it waits for.
type migrationStep struct {
	what      string   // what it does, before the table's name: "adding column fence to"
	lock      string   // the lock it waits for, for messages
	sql       string   // "" for the advisory lock
	conflicts []string // lock modes on the table that hold it back; nil for the advisory lock
}

// Lock modes in pg_locks that conflict with ACCESS EXCLUSIVE, and with SHARE.
var (
	conflictsAccessExclusive = []string{"AccessShareLock", "RowShareLock", "RowExclusiveLock", "ShareUpdateExclusiveLock",
		"ShareLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock"}
	conflictsShare = []string{"RowExclusiveLock", "ShareUpdateExclusiveLock", "ShareRowExclusiveLock",
		"ExclusiveLock", "AccessExclusiveLock"}
)

// steps returns the statements that bring a table in state m up to date.
func (s *Store) steps(m *migrationState) []migrationStep {
	var steps []migrationStep
	if !m.table {
		steps = append(steps, migrationStep{what: "creating table", lock: "a lock on its name", sql: s.sql.migrate.table})
	} else if !m.fence {
		steps = append(steps, migrationStep{what: "adding column fence to", lock: "an AccessExclusiveLock on it",
			sql: s.sql.migrate.fence, conflicts: conflictsAccessExclusive})
	}
	if !m.index {
		steps = append(steps, migrationStep{what: "building index " + pgx.Identifier{s.cfg.Table + indexSuffix}.Sanitize() + " on",
			lock: "a ShareLock on it", sql: s.sql.migrate.index, conflicts: conflictsShare})
	}
	return steps
}

// migrate brings the table up to date. It runs at READ COMMITTED whatever
// the pool's default, so the catalog read again under the advisory lock
// sees a migration that committed while this one waited.
func (s *Store) migrate(ctx context.Context) error {
	var (
		waiting  *migrationStep // the step whose lock the migration waits for
		lockName string         // the table's fully qualified name, keying the advisory lock
	)
	opts := pgx.TxOptions{IsoLevel: pgx.ReadCommitted}
	err := pgx.BeginTxFunc(ctx, s.pool, opts, func(tx pgx.Tx) error {
		m, err := s.migrationState(ctx, tx)
		if err != nil || m.upToDate() {
			return err
		}
		lockName = pgx.Identifier{m.schema, s.cfg.Table}.Sanitize()
		waiting = &migrationStep{what: "waiting for the advisory lock that serialises migrations of",
			lock: "it (another process is migrating the table)"}
		timeout := strconv.FormatInt(ceilMillis(s.cfg.MigrateLockTimeout), 10) + "ms"
		if _, err := tx.Exec(ctx, s.sql.migrate.lock, timeout, lockName); err != nil {
			return err
		}
		// Another process may have migrated the table while this one waited.
		if m, err = s.migrationState(ctx, tx); err != nil {
			return err
		}
		for _, step := range s.steps(&m) {
			waiting = &step
			if _, err := tx.Exec(ctx, step.sql); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		return nil
	}
	if lockTimedOut(err) && waiting != nil {
		return s.blocked(ctx, waiting, lockName, err)
	}
	return fmt.Errorf("jobonce: pgstore migrate %s: %w", s.table, err)
}

func (s *Store) migrationState(ctx context.Context, tx pgx.Tx) (migrationState, error) {
	var m migrationState
	err := tx.QueryRow(ctx, s.sql.migrate.state, s.table, s.cfg.Table+indexSuffix, s.cfg.Schema).
		Scan(&m.schema, &m.table, &m.fence, &m.index)
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
	return fmt.Errorf("%w: %s %s needs %s, not granted within %s (Config.MigrateLockTimeout; claims on the table queue behind the migration while it waits, so it gave up and changed nothing); %s: %w",
		ErrMigrationBlocked, step.what, s.table, step.lock, s.cfg.MigrateLockTimeout, who, cause)
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
