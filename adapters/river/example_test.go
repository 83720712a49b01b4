package riveronce_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	riveronce "github.com/jobonce/jobonce/adapters/river"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/pgstore"
	"github.com/jobonce/jobonce/internal/pgtest"
	"github.com/jobonce/jobonce/internal/testenv"
)

// WelcomeArgs names its own key: one welcome email per user, however many
// times the job is inserted.
type WelcomeArgs struct {
	UserID int64 `json:"user_id"`
}

func (WelcomeArgs) Kind() string { return "welcome_email" }

func (a WelcomeArgs) OnceKey() string { return "email:welcome:" + strconv.FormatInt(a.UserID, 10) }

// The middleware guards every job of the client. The same client records
// OnceKey at insert time, where the middleware finds it.
func ExampleMustMiddleware() {
	ctx := context.Background()
	pool, schema, drop := exampleDB(ctx)
	defer drop()

	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[WelcomeArgs]) error {
		fmt.Printf("sending the welcome email to user %d\n", job.Args.UserID)
		return nil
	}))
	cfg := &river.Config{
		Middleware: []rivertype.Middleware{riveronce.MustMiddleware(exampleGuard(ctx, pool), nil)},
		Workers:    workers,
	}
	// Inserted twice, sent once; both jobs complete.
	insertAndWork(ctx, pool, schema, cfg, WelcomeArgs{UserID: 42}, WelcomeArgs{UserID: 42})
	// Output:
	// sending the welcome email to user 42
}

// ResizeArgs names no key: copies with equal args share the default key,
// the kind and a fingerprint of the encoded args.
type ResizeArgs struct {
	Image string `json:"image"`
	Width int    `json:"width"`
}

func (ResizeArgs) Kind() string { return "resize" }

type ResizeWorker struct {
	river.WorkerDefaults[ResizeArgs]
}

func (w *ResizeWorker) Work(ctx context.Context, job *river.Job[ResizeArgs]) error {
	fmt.Printf("resizing %s to %dpx\n", job.Args.Image, job.Args.Width)
	return nil
}

// Wrap guards one worker and keeps its Timeout, NextRetry and Middleware.
func ExampleWrap() {
	ctx := context.Background()
	pool, schema, drop := exampleDB(ctx)
	defer drop()

	resize, err := riveronce.Wrap[ResizeArgs](exampleGuard(ctx, pool), &ResizeWorker{}, nil)
	if err != nil {
		log.Fatal(err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, resize)
	job := ResizeArgs{Image: "cat.png", Width: 200}
	insertAndWork(ctx, pool, schema, &river.Config{Workers: workers}, job, job)
	// Output:
	// resizing cat.png to 200px
}

// ShipArgs carries a request id that differs between copies of one job.
type ShipArgs struct {
	OrderID   string `json:"order_id"`
	RequestID string `json:"request_id"`
}

func (ShipArgs) Kind() string { return "ship" }

// A key function for jobs whose args do not name their effect alone: the
// key names the order, and the fingerprint check is off because copies
// differ in their request ids.
func ExampleConfig_key() {
	ctx := context.Background()
	pool, schema, drop := exampleDB(ctx)
	defer drop()

	cfg := &riveronce.Config{
		Key: func(job *rivertype.JobRow) string {
			var args ShipArgs
			if err := json.Unmarshal(job.EncodedArgs, &args); err != nil {
				return "" // an empty key cancels the job
			}
			return "ship:" + args.OrderID
		},
		Fingerprint: func(*rivertype.JobRow) string { return "" },
	}
	workers := river.NewWorkers()
	ship := river.WorkFunc(func(ctx context.Context, job *river.Job[ShipArgs]) error {
		fmt.Println("shipping order", job.Args.OrderID)
		return nil
	})
	river.AddWorker(workers, riveronce.MustWrap(exampleGuard(ctx, pool), ship, cfg))
	insertAndWork(ctx, pool, schema, &river.Config{Workers: workers},
		ShipArgs{OrderID: "o-7", RequestID: "req-1"}, ShipArgs{OrderID: "o-7", RequestID: "req-2"})
	// Output:
	// shipping order o-7
}

// CreditArgs adds credit to an account: a database effect.
type CreditArgs struct {
	Account string `json:"account"`
	Cents   int64  `json:"cents"`
	Request string `json:"request"`
}

func (CreditArgs) Kind() string { return "credit" }

func (a CreditArgs) OnceKey() string { return "credit:" + a.Request }

// CreditWorker writes its effect in the transaction it is given.
type CreditWorker struct {
	river.WorkerDefaults[CreditArgs]
}

func (w *CreditWorker) WorkTx(ctx context.Context, tx pgx.Tx, job *river.Job[CreditArgs]) error {
	return credit(ctx, tx, job.Args)
}

func credit(ctx context.Context, tx pgx.Tx, args CreditArgs) error {
	_, err := tx.Exec(ctx, `UPDATE accounts SET cents = cents + $1 WHERE id = $2`, args.Cents, args.Account)
	return err
}

// WrapTx makes the credit exactly-once with PostgreSQL alone: the key's
// record, the update and the job's completion commit in one transaction.
func ExampleWrapTx() {
	ctx := context.Background()
	pool, schema, drop := exampleDB(ctx)
	defer drop()
	openAccount(ctx, pool, "acme")

	txGuard, err := core.NewTxGuard[pgx.Tx](exampleGuard(ctx, pool))
	if err != nil {
		log.Fatal(err)
	}
	creditWorker, err := riveronce.WrapTx[CreditArgs](txGuard, &CreditWorker{}, nil)
	if err != nil {
		log.Fatal(err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, creditWorker)
	job := CreditArgs{Account: "acme", Cents: 100, Request: "req-1"}
	insertAndWork(ctx, pool, schema, &river.Config{Workers: workers}, job, job)
	fmt.Println("balance:", balance(ctx, pool, "acme"))
	// Output:
	// balance: 100
}

// WorkTx does the same from inside a worker's own Work method.
func ExampleWorkTx() {
	ctx := context.Background()
	pool, schema, drop := exampleDB(ctx)
	defer drop()
	openAccount(ctx, pool, "acme")

	txGuard, err := core.NewTxGuard[pgx.Tx](exampleGuard(ctx, pool))
	if err != nil {
		log.Fatal(err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[CreditArgs]) error {
		return riveronce.WorkTx(ctx, txGuard, job, func(ctx context.Context, tx pgx.Tx) error {
			return credit(ctx, tx, job.Args)
		})
	}))
	job := CreditArgs{Account: "acme", Cents: 250, Request: "req-9"}
	insertAndWork(ctx, pool, schema, &river.Config{Workers: workers}, job, job)
	fmt.Println("balance:", balance(ctx, pool, "acme"))
	// Output:
	// balance: 250
}

// exampleDB returns a pool whose connections use a schema of their own
// holding River's tables, the schema's name, and a function that drops the
// schema and closes the pool.
func exampleDB(ctx context.Context) (*pgxpool.Pool, string, func()) {
	schema := "example_" + testenv.RandomID(6)
	cfg, err := pgxpool.ParseConfig(pgtest.DatabaseURL())
	if err != nil {
		log.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		log.Fatal(err)
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema, Logger: exampleLogger})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		log.Fatal(err)
	}
	return pool, schema, func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		pool.Close()
	}
}

// exampleGuard returns a Guard that keeps its keys in the database of pool.
func exampleGuard(ctx context.Context, pool *pgxpool.Pool) *core.Guard {
	store, err := pgstore.New(ctx, pool, &pgstore.Config{Migrate: true})
	if err != nil {
		log.Fatal(err)
	}
	guard, err := core.New(store, nil)
	if err != nil {
		log.Fatal(err)
	}
	return guard
}

// insertAndWork runs a River client configured by cfg on River's tables in
// schema: it inserts jobs, works them until they have all completed, and
// stops. The client has one worker, so that a job's second copy finds the
// first one done (with more, a copy that finds its job running is snoozed),
// and logs to stderr.
func insertAndWork(ctx context.Context, pool *pgxpool.Pool, schema string, cfg *river.Config, jobs ...river.JobArgs) {
	cfg.Schema = schema
	cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}}
	cfg.Logger = exampleLogger
	cfg.TestOnly = true
	client, err := river.NewClient(riverpgxv5.New(pool), cfg)
	if err != nil {
		log.Fatal(err)
	}
	for _, args := range jobs {
		if _, err := client.Insert(ctx, args, nil); err != nil {
			log.Fatal(err)
		}
	}
	completed, cancel := client.Subscribe(river.EventKindJobCompleted)
	defer cancel()
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	timeout, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	for range jobs {
		select {
		case <-completed:
		case <-timeout.Done():
			log.Fatal("the jobs did not complete in time")
		}
	}
	if err := client.Stop(timeout); err != nil {
		log.Fatal(err)
	}
}

var exampleLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// openAccount creates the accounts table with one empty account.
func openAccount(ctx context.Context, pool *pgxpool.Pool, id string) {
	_, err := pool.Exec(ctx, `CREATE TABLE accounts (id text PRIMARY KEY, cents bigint NOT NULL)`)
	if err == nil {
		_, err = pool.Exec(ctx, `INSERT INTO accounts VALUES ($1, 0)`, id)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// balance returns an account's balance.
func balance(ctx context.Context, pool *pgxpool.Pool, id string) int64 {
	var cents int64
	if err := pool.QueryRow(ctx, `SELECT cents FROM accounts WHERE id = $1`, id).Scan(&cents); err != nil {
		log.Fatal(err)
	}
	return cents
}
