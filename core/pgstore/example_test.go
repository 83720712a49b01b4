package pgstore_test

import (
	"context"
	"fmt"
	"log"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/pgstore"
	"github.com/jobonce/jobonce/internal/pgtest"
	"github.com/jobonce/jobonce/internal/testenv"
)

// A Guard on PostgreSQL: leased claims and done markers in a table.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.DatabaseURL())
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	store, err := pgstore.New(ctx, pool, &pgstore.Config{Migrate: true})
	if err != nil {
		log.Fatal(err)
	}
	guard, err := core.New(store, &core.Config{KeyPrefix: exampleRun()})
	if err != nil {
		log.Fatal(err)
	}
	for range 2 { // the job is delivered twice
		out, err := guard.Do(ctx, "email:welcome:user-42", func(ctx context.Context) error {
			fmt.Println("sending the email")
			return nil
		})
		fmt.Println(out, err)
	}
	// Output:
	// sending the email
	// ran <nil>
	// duplicate <nil>
}

// Exactly once for a database effect: the transactional mode records the
// key in the same transaction as the effect, so both commit or neither does.
func Example_transactional() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.DatabaseURL())
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := pgstore.New(ctx, pool, &pgstore.Config{Migrate: true})
	if err != nil {
		log.Fatal(err) // without Migrate: errors.Is(err, pgstore.ErrNotMigrated)
	}
	guard, err := core.New(store, &core.Config{KeyPrefix: exampleRun()})
	if err != nil {
		log.Fatal(err)
	}
	txg, err := core.NewTxGuard[pgx.Tx](guard) // the same Guard's outcomes, logs and metrics
	if err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS example_credits (invoice text, amount int)"); err != nil {
		log.Fatal(err)
	}
	credit := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO example_credits VALUES ('42', 100)")
		return err
	}
	for range 2 { // the job is delivered twice
		// One transaction records the key, runs credit and commits.
		out, err := txg.Do(ctx, "invoice:42:credit", credit)
		if err != nil {
			log.Fatal(err) // core.ErrRunning: another copy's transaction is open; retry later
		}
		fmt.Println(out)
	}
	// Output:
	// ran
	// duplicate
}

// A fenced write: the job's claim's fence goes with its write, and a row
// keeps the fence of the last write, so the late write of a copy whose claim
// lapsed (a smaller fence) changes nothing.
func Example_fence() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.DatabaseURL())
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := pgstore.New(ctx, pool, &pgstore.Config{Migrate: true})
	if err != nil {
		log.Fatal(err)
	}
	guard, err := core.New(store, &core.Config{KeyPrefix: exampleRun()})
	if err != nil {
		log.Fatal(err)
	}
	account := exampleRun() // a row of its own for each run
	if _, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS example_accounts (id text PRIMARY KEY, balance int, fence bigint NOT NULL DEFAULT 0)"); err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO example_accounts (id, balance) VALUES ($1, 0)", account); err != nil {
		log.Fatal(err)
	}
	credit := func(ctx context.Context, fence int64) int64 {
		tag, err := pool.Exec(ctx, "UPDATE example_accounts SET balance = balance + 100, fence = $2 WHERE id = $1 AND fence < $2", account, fence)
		if err != nil {
			log.Fatal(err)
		}
		return tag.RowsAffected()
	}
	var fence int64
	_, err = guard.Do(ctx, "credit:"+account, func(ctx context.Context) error {
		fence, _ = core.Fence(ctx)
		fmt.Println("the job's write:", credit(ctx, fence), "row")
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// A zombie: an earlier claim of the job whose write arrives late.
	fmt.Println("a stale write:", credit(ctx, fence-1), "rows")
	// Output:
	// the job's write: 1 row
	// a stale write: 0 rows
}

// exampleRun returns a key prefix of its own for each run of an example, so
// that examples run again against the same database start afresh.
func exampleRun() string { return "example:" + testenv.RandomID(8) + ":" }

// Pruning in the background, stopped with the program's context.
func ExampleStore_RunPruner() {
	ctx, cancel := context.WithCancel(context.Background())
	pool, err := pgxpool.New(ctx, pgtest.DatabaseURL())
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := pgstore.New(ctx, pool, &pgstore.Config{Migrate: true})
	if err != nil {
		log.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		err := store.RunPruner(ctx, time.Minute) // every minute, until ctx is done
		fmt.Println("pruner stopped:", err)
	})

	// ... run the workers ...

	cancel()
	wg.Wait() // the pruner has returned
	// Output:
	// pruner stopped: <nil>
}

// The migration for tools that apply SQL themselves.
func ExampleMigrationSQL() {
	sql, err := pgstore.MigrationSQL(&pgstore.Config{Schema: "jobs", Table: "dedup_keys"})
	if err != nil {
		log.Fatal(err)
	}
	for _, line := range strings.Split(sql, "\n") {
		if strings.HasPrefix(line, "CREATE") {
			fmt.Println(line)
		}
	}
	// Output:
	// CREATE TABLE IF NOT EXISTS "jobs"."dedup_keys" (
	// CREATE INDEX IF NOT EXISTS "dedup_keys_expires_at_idx" ON "jobs"."dedup_keys" (expires_at);
}
