// Package pgstore keeps jobonce claims in a PostgreSQL table (pgx v5), for
// programs that run PostgreSQL and no Redis. It also records a job exactly
// once inside the job's own transaction.
//
//	import "github.com/jobonce/jobonce/core/pgstore"
//
// # Getting started
//
// New returns a Store; pass it to core.New and use the Guard as with any
// store:
//
//	store, err := pgstore.New(ctx, pool, &pgstore.Config{Migrate: true})
//	if err != nil {
//		return err // pgstore.ErrNotMigrated, pgstore.ErrMigrationBlocked, …
//	}
//	guard, err := core.New(store, nil)
//
// One row per key holds a running claim or a done marker. Every lease and
// retention runs on the database's clock.
//
// # Transactional mode
//
// core.NewTxGuard[pgx.Tx](guard) gives the Guard a transactional mode.
// TxGuard.Do records the key as done in a transaction, runs the job's
// function in it and commits. The record and the job's database effects
// commit together, or neither does. A copy that meets an uncommitted record
// waits at most Config.LockTimeout, then gets core.ErrRunning. Both modes
// share the table's rows.
//
// # Pruning
//
// Expired rows stay until pruned. Call Prune from a periodic job, or run
// RunPruner on a goroutine.
//
// docs/stores.md describes the store and its transactional mode.
// docs/postgresql.md covers roles, isolation, migrations, locks, pruning,
// fences, the completion signal and connection poolers.
package pgstore
