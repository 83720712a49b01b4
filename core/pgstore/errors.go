package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNotMigrated reports that the keys table, or one of its columns, does
// not exist. Run Migrate, or set Config.Migrate, first.
var ErrNotMigrated = errors.New("jobonce: pgstore: table is missing or out of date; run pgstore.Migrate or set pgstore.Config.Migrate")

// ErrMigrationBlocked reports that a migration gave up waiting for a lock
// (Config.MigrateLockTimeout). The error names the lock and its holders.
// Nothing was changed: run the migration again once they end.
var ErrMigrationBlocked = errors.New("jobonce: pgstore: migration blocked")

// SQLSTATE codes the store reacts to.
const (
	codeUndefinedTable   = "42P01"
	codeUndefinedColumn  = "42703"
	codeLockNotAvailable = "55P03"
	codeLimitExceeded    = "54000" // for a key: longer than the index can hold
	codeSerialization    = "40001" // serialization_failure
	codeDeadlock         = "40P01" // deadlock_detected
)

// sqlState returns err's SQLSTATE, or "" when err is not a server error.
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// wrap adds "run Migrate" to errors caused by a missing table or column.
func (s *Store) wrap(err error) error {
	if err == nil {
		return nil
	}
	switch sqlState(err) {
	case codeUndefinedTable, codeUndefinedColumn:
		return fmt.Errorf("%w (table %s): %w", ErrNotMigrated, s.table, err)
	case codeLimitExceeded:
		return fmt.Errorf("jobonce: pgstore: the key is too long for the primary key index of %s (about 2700 bytes at most; a core.Guard stores long keys hashed, see core.Config.PlainKeys): %w", s.table, err)
	}
	return err
}

// fail wraps the error of a call made with ctx: s.wrap's advice, and ctx's
// error when ctx is done, so that a statement cancelled because the caller
// gave up reads as the caller's cancellation rather than a database outage.
func (s *Store) fail(ctx context.Context, err error) error {
	err = s.wrap(err)
	cerr := ctx.Err()
	if err == nil || cerr == nil || errors.Is(err, cerr) {
		return err
	}
	return fmt.Errorf("jobonce: pgstore: %w: %w", cerr, err)
}

// lockTimedOut reports whether err is a lock_timeout expiry.
func lockTimedOut(err error) bool { return sqlState(err) == codeLockNotAvailable }

// lookAgain reports whether err says the statement's transaction was rolled
// back because of a concurrent one (a serialization failure or a deadlock):
// nothing it did holds, and running it again reads the key as it is now.
func lookAgain(err error) bool {
	code := sqlState(err)
	return code == codeSerialization || code == codeDeadlock
}
