package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/pgstore"
)

// A Guard on PostgreSQL: leased claims and done markers in a table.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	store, err := pgstore.New(ctx, pool, &pgstore.Config{Migrate: true})
	if err != nil {
		log.Fatal(err)
	}
	guard, err := core.New(store, nil)
	if err != nil {
		log.Fatal(err)
	}
	out, err := guard.Do(ctx, "email:welcome:user-42", func(ctx context.Context) error {
		return nil // send the email
	})
	fmt.Println(out, err)
}

// Exactly once for a database effect: the key is recorded in the same
// transaction as the effect.
func ExampleStore_DoTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := pgstore.New(ctx, pool, nil)
	if err != nil {
		log.Fatal(err) // errors.Is(err, pgstore.ErrNotMigrated): run pgstore.Migrate first
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)
	out, err := store.DoTx(ctx, tx, "invoice:42:credit", func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance + 100 WHERE id = 7")
		return err
	})
	switch {
	case errors.Is(err, core.ErrRunning):
		after, _ := core.RetryAfter(err)
		fmt.Println("another copy holds the key; retry in", after)
	case err != nil:
		log.Fatal(err) // the effect failed: the deferred rollback leaves no record
	case out == core.Ran:
		if err := tx.Commit(ctx); err != nil {
			log.Fatal(err) // nothing recorded either: a retry runs it
		}
	case out == core.Duplicate:
		fmt.Println("already credited")
	}
}

// DoInTx runs the transaction itself.
func ExampleStore_DoInTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := pgstore.New(ctx, pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	out, err := store.DoInTx(ctx, "order:9:ship", func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO shipments (order_id) VALUES (9)")
		return err
	})
	fmt.Println(out, err)
}

// Pruning in the background, stopped with the program's context.
func ExampleStore_RunPruner() {
	ctx, cancel := context.WithCancel(context.Background())
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := pgstore.New(ctx, pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = store.RunPruner(ctx, time.Minute) })

	// ... run the workers ...

	cancel()
	wg.Wait() // the pruner has returned
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
