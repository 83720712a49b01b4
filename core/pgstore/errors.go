package pgstore

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNotMigrated reports that the keys table, or one of its columns, does
// not exist: run Migrate (or set Config.Migrate) first.
var ErrNotMigrated = errors.New("jobonce: pgstore table is missing; run pgstore.Migrate or set pgstore.Config.Migrate")

// SQLSTATE codes the store reacts to.
const (
	codeUndefinedTable   = "42P01"
	codeUndefinedColumn  = "42703"
	codeLockNotAvailable = "55P03"
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
	}
	return err
}

// lockTimedOut reports whether err is a lock_timeout expiry.
func lockTimedOut(err error) bool { return sqlState(err) == codeLockNotAvailable }
