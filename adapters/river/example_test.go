package riveronce_test

import (
	"context"
	"log"
	"os"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	riveronce "github.com/jobonce/jobonce/adapters/river"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/pgstore"
	"github.com/jobonce/jobonce/core/redisstore"
)

// WelcomeArgs names its own key: one welcome email per user, however many
// times the job is inserted.
type WelcomeArgs struct {
	UserID int64 `json:"user_id"`
}

func (WelcomeArgs) Kind() string { return "welcome_email" }

func (a WelcomeArgs) OnceKey() string { return "email:welcome:" + strconv.FormatInt(a.UserID, 10) }

type WelcomeWorker struct {
	river.WorkerDefaults[WelcomeArgs]
}

func (w *WelcomeWorker) Work(ctx context.Context, job *river.Job[WelcomeArgs]) error {
	log.Printf("sending the welcome email to user %d", job.Args.UserID)
	return nil
}

// newGuard returns a guard on Redis.
func newGuard() *core.Guard {
	store, err := redisstore.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}), nil)
	if err != nil {
		log.Fatal(err)
	}
	guard, err := core.New(store, nil)
	if err != nil {
		log.Fatal(err)
	}
	return guard
}

// The middleware guards every job of the client. The same client records
// OnceKey at insert time, where the middleware finds it.
func ExampleMiddleware() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	workers := river.NewWorkers()
	river.AddWorker(workers, &WelcomeWorker{})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Middleware: []rivertype.Middleware{riveronce.Middleware(newGuard(), nil)},
		Queues:     map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 100}},
		Workers:    workers,
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Stop(ctx) }()

	// Inserted twice, sent once.
	for range 2 {
		if _, err := client.Insert(ctx, WelcomeArgs{UserID: 42}, nil); err != nil {
			log.Fatal(err)
		}
	}
}

// Wrap guards one worker and keeps its Timeout, NextRetry and Middleware.
func ExampleWrap() {
	workers := river.NewWorkers()
	river.AddWorker(workers, riveronce.Wrap[WelcomeArgs](newGuard(), &WelcomeWorker{}, nil))
	_ = workers // pass to river.Config.Workers
}

// A key function for jobs whose args do not name their effect.
func ExampleConfig_key() {
	cfg := &riveronce.Config{
		Key: func(job *rivertype.JobRow) string {
			return job.Kind + ":" + job.Queue + ":" + core.Fingerprint(job.EncodedArgs)
		},
	}
	_ = riveronce.Middleware(newGuard(), cfg)
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
	_, err := tx.Exec(ctx, `UPDATE accounts SET cents = cents + $1 WHERE id = $2`, job.Args.Cents, job.Args.Account)
	return err
}

// WrapTx makes the credit exactly-once with PostgreSQL alone: the key's
// record, the update and the job's completion commit in one transaction.
func ExampleWrapTx() {
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
	workers := river.NewWorkers()
	river.AddWorker(workers, riveronce.WrapTx[CreditArgs](store, pool, &CreditWorker{}, nil))
	_ = workers // pass to river.Config.Workers
}

// WorkTx does the same from inside a worker's own Work method.
func ExampleWorkTx() {
	var store *pgstore.Store // from pgstore.New
	var pool *pgxpool.Pool
	work := func(ctx context.Context, job *river.Job[CreditArgs]) error {
		return riveronce.WorkTx(ctx, store, pool, job, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE accounts SET cents = cents + $1 WHERE id = $2`, job.Args.Cents, job.Args.Account)
			return err
		})
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(work))
	_ = workers
}
