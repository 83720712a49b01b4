// Package pgstore keeps jobonce claims in a PostgreSQL table (pgx v5), for
// programs that run PostgreSQL and no Redis, and records jobs exactly once
// inside the caller's own transaction.
//
//	import "github.com/jobonce/jobonce/core/pgstore"
//
// # Leased claims
//
// A Store implements driver.Store and driver.BatchStore: pass it to core.New and
// use the Guard as with any store. One row per key holds either a running
// claim (token, lease deadline, fingerprint) or a done marker (fingerprint,
// result, retention deadline). A claim is one statement that inserts the row,
// takes over an expired one, or reads the current state back. Extend,
// Complete and Release are token-checked updates and return
// core.ErrLeaseLost when the token no longer holds the key. Every deadline is
// computed on the database's clock, never the worker's, so workers with
// skewed clocks agree on when a lease ends.
//
// Keys, fingerprints and results are bytea: any bytes, NUL and invalid UTF-8
// included. Every duplicate's claim reads the stored result whole, so a
// core.Guard stores results of up to core.Config.MaxResultSize (64 KiB by
// default; PostgreSQL compresses and moves to its TOAST table a result over
// about 2 KB) and writes the done row of a larger one without it. A key is also the primary key, whose index holds about 2700
// bytes; a longer key gives an error saying so (a core.Guard stores long keys
// hashed). Leases and retentions must be at least 1ms, as on every jobonce
// store; anything up to the longest time.Duration is kept.
//
// A call whose context ends returns an error wrapping the context's error.
// pgx then cancels the statement on the server, but one the server finished
// first has taken effect: like any failed call, its outcome is unknown (a
// claim may hold its key until its lease ends; a done marker may be written).
//
// # Transactional mode
//
// The Store implements driver.TxStore for pgx.Tx, so core.NewTxGuard gives
// a Guard on it a transactional mode: TxGuard.Do begins a transaction on
// the Store's pool, records the key as done in it, runs the job's function
// in that same transaction, and commits. The record and the job's database
// effects become durable together; a failure, a rollback or a connection
// that dies mid-transaction leaves neither, so a later copy runs. For
// effects that live in the same database this is exactly once: no
// duplicate, nothing missing. A copy that meets the key's uncommitted record
// waits at most Config.LockTimeout and then gets core.ErrRunning, so no
// worker hangs behind a long transaction. The outcomes are the Guard's:
// logged, counted and observed as its own.
//
// Both modes share rows, since the Guard derives the stored key once: a live
// leased claim turns a transactional copy away with core.ErrRunning, an
// expired one is taken over, and the Guard sees a transactional record as
// done.
//
// The record is written inside a savepoint (RecordTx leaves the transaction
// usable when the key is not free). A TxGuard transaction begins READ
// COMMITTED whatever the role's default_transaction_isolation, and the
// store's own statements run again at READ COMMITTED when a stricter default
// rolled them back (SQLSTATE 40001, 40P01): every default works. Only a
// caller that calls RecordTx on a transaction of its own should begin it
// READ COMMITTED: under REPEATABLE READ a key another copy committed after
// its snapshot is reported running (retry later) rather than done.
//
// # Fences
//
// A claim, or a transactional record, gets a fence (driver.ClaimReply.Fence)
// computed on the database's clock and kept in the row's fence column: the
// clock in microseconds since the Unix epoch, or one more than the fence of
// the expired row it takes over, whichever is larger. Expired rows, released
// claims included, stay until pruned, so the next claim after a release or a
// lapsed lease gets a fence greater than the last holder's even if the clock
// stepped back; after a row is pruned, the next fence comes from the clock
// alone.
//
// # Schema
//
// The table (Config.Schema, Config.Table) is created by Migrate, or by New
// when Config.Migrate is set; MigrationSQL returns the SQL for migration
// tools. Migrate also adds the columns a later version needs (fence) to a
// table an earlier version created. Without it, New returns an error
// matching ErrNotMigrated that names the missing table or column. New reads
// the table, so a database it cannot reach within its context is its error;
// Ready, which core.Guard.Ready calls for a health or readiness check, reads
// it again.
//
// A migration may run while workers use the table (a rolling deploy that
// sets Config.Migrate). It reads the catalog first and takes no lock on a
// table that is up to date, so it never waits for a transactional job. A
// change takes a table lock that claims queue behind while it waits (ACCESS
// EXCLUSIVE to add a column, SHARE to build the index): each wait is bounded
// by Config.MigrateLockTimeout, after which the migration changes nothing
// and returns an error matching ErrMigrationBlocked that names the lock and
// the transactions holding it. Migrations of one table, with or without
// Config.Schema, serialise on an advisory lock named by the table's schema
// and name.
//
// # Connection poolers
//
// The store works with any pgx QueryExecMode, including the modes without
// prepared statements that PgBouncer's transaction pooling needs. Each
// statement sets lock_timeout for its own transaction only. A Listener
// (below) needs a session of its own: through PgBouncer's transaction
// pooling, give the pool a direct connection string, or waiting copies
// fall back to reading their keys by their deadlines.
//
// # Notifications
//
// Store is a driver.Notifier: Await marks a key found running awaited, in
// the same READ COMMITTED transaction as its claim (an empty result on the
// running row, which is NULL otherwise: no schema change), and the complete
// or release that ends a marked claim calls pg_notify on the store's
// channel, "jobonce:" and the table's schema and name (Channel), with the
// key in hex, sent when its transaction commits. A complete nobody awaits
// notifies nothing, so it costs no more than before: a commit that
// notifies takes a lock that serialises such commits, with their flushes
// (BenchmarkCompleteAwaited: 16 callers completed 1.7k-2.5k unawaited
// claims a second and 300-360 awaited ones, on a busy machine). A Listener
// holds one connection of its own, made with the pool's settings, listening
// to the channel, read by a goroutine of its own until Close, and made
// again when it breaks (every waiting copy then reads its key again).
// Workers of the earlier release ignore the mark, and a takeover or a
// transactional record replaces it; a claim held by an open transaction is
// not marked.
//
// # Throughput
//
// Every Claim and Complete is a commit, and PostgreSQL flushes each commit to
// disk before it answers: that flush, more than the statements, bounds a
// Guard's rate on PostgreSQL. A Store may be given a pool of its own whose
// connections set synchronous_commit to off (in
// pgxpool.Config.ConnConfig.RuntimeParams): claims and done markers then
// answer without waiting for the flush, and a crash of the database server
// (not of a worker) can lose the last fraction of a second of them, the
// trade-off Redis makes with appendfsync everysec. TxGuard.Do commits on
// that pool too.
//
// # Pruning
//
// Expired rows stay until pruned: call Prune from a periodic job of your own,
// or run RunPruner on a goroutine that ends with its context. Pruning deletes
// in bounded batches and never touches a live claim. A claim of a key whose
// expired row Prune is deleting waits for that statement: Prune keeps each
// one well under Config.LockTimeout (it sizes them by their duration, and
// their commits do not wait for the disk), so such a claim is not answered
// running.
package pgstore
