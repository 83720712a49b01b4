// Command river runs a River client with jobonce on PostgreSQL alone: every
// welcome email is inserted twice, as an at-least-once producer would, and
// sent once (Wrap, with the guard's claims in a pgstore table); every credit
// is inserted twice and applied exactly once (WrapTx: the key's record, the
// balance update and the job's completion commit in one transaction).
//
//	go -C examples run ./river
//
// It needs a PostgreSQL: DATABASE_URL, by default
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable. It works in a
// schema of its own, created at start and dropped when it ends.
package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	riveronce "github.com/jobonce/jobonce/adapters/river"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/pgstore"
)

// WelcomeArgs sends one welcome email per user: its key names the effect.
type WelcomeArgs struct {
	UserID int `json:"user_id"`
}

func (WelcomeArgs) Kind() string { return "welcome_email" }

// OnceKey implements riveronce.Keyer.
func (a WelcomeArgs) OnceKey() string { return "email:welcome:" + strconv.Itoa(a.UserID) }

// WelcomeWorker "sends" the email: it counts sends.
type WelcomeWorker struct {
	river.WorkerDefaults[WelcomeArgs]
	sent atomic.Int64
}

func (w *WelcomeWorker) Work(ctx context.Context, job *river.Job[WelcomeArgs]) error {
	time.Sleep(20 * time.Millisecond) // the mail server
	w.sent.Add(1)
	return nil
}

// CreditArgs credits an account once per request.
type CreditArgs struct {
	Account int    `json:"account"`
	Cents   int64  `json:"cents"`
	Request string `json:"request"`
}

func (CreditArgs) Kind() string { return "credit" }

// OnceKey implements riveronce.Keyer.
func (a CreditArgs) OnceKey() string { return "credit:" + a.Request }

// CreditWorker writes the credit in the transaction WrapTx gives it.
type CreditWorker struct {
	river.WorkerDefaults[CreditArgs]
}

func (w *CreditWorker) WorkTx(ctx context.Context, tx pgx.Tx, job *river.Job[CreditArgs]) error {
	_, err := tx.Exec(ctx, `UPDATE accounts SET cents = cents + $1 WHERE id = $2`, job.Args.Cents, job.Args.Account)
	return err
}

func main() {
	users := flag.Int("users", 20, "welcome emails and credits to insert, each twice")
	flag.Parse()
	if err := run(*users); err != nil {
		log.Fatal(err)
	}
}

func run(users int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := cmp.Or(os.Getenv("DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	pool, schema, drop, err := connect(ctx, url)
	if err != nil {
		return err
	}
	defer drop()
	defer pool.Close()

	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema})
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrations: %w", err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE accounts (id int PRIMARY KEY, cents bigint NOT NULL);
		INSERT INTO accounts SELECT g, 0 FROM generate_series(0, 9) g`); err != nil {
		return err
	}

	// One pgstore table serves the guard's leased claims (Wrap) and the
	// transactional records (WrapTx): no Redis needed.
	store, err := pgstore.New(ctx, pool, &pgstore.Config{Migrate: true})
	if err != nil {
		return err
	}
	// A copy that finds its twin running snoozes for the claim's remaining
	// lease, at most MaxRetryAfter: check back within a second.
	guard, err := core.New(store, &core.Config{MaxRetryAfter: time.Second})
	if err != nil {
		return err
	}
	// The same Guard's transactional mode: its outcomes are logged, counted
	// and observed with the rest.
	txGuard, err := core.NewTxGuard[pgx.Tx](guard)
	if err != nil {
		return err
	}
	welcome := &WelcomeWorker{}
	workers := river.NewWorkers()
	river.AddWorker(workers, riveronce.MustWrap[WelcomeArgs](guard, welcome, nil))
	river.AddWorker(workers, riveronce.MustWrapTx[CreditArgs](txGuard, &CreditWorker{}, nil))
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		FetchCooldown: 10 * time.Millisecond,
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 20}},
		Schema:        schema,
		Workers:       workers,
	})
	if err != nil {
		return err
	}
	completed, unsubscribe := client.Subscribe(river.EventKindJobCompleted)
	defer unsubscribe()
	if err := client.Start(ctx); err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(stopCtx)
	}()

	// Every job twice: two rows, two job IDs, the same args.
	var params []river.InsertManyParams
	for i := range users {
		welcomeArgs := WelcomeArgs{UserID: i}
		credit := CreditArgs{Account: i % 10, Cents: 100, Request: "req-" + strconv.Itoa(i)}
		params = append(params,
			river.InsertManyParams{Args: welcomeArgs}, river.InsertManyParams{Args: welcomeArgs},
			river.InsertManyParams{Args: credit}, river.InsertManyParams{Args: credit})
	}
	if _, err := client.InsertMany(ctx, params); err != nil {
		return err
	}
	for range params {
		select {
		case <-completed:
		case <-ctx.Done():
			return fmt.Errorf("waiting for jobs: %w", ctx.Err())
		}
	}

	var cents int64
	if err := pool.QueryRow(ctx, `SELECT sum(cents) FROM accounts`).Scan(&cents); err != nil {
		return err
	}
	fmt.Printf("jobs inserted:   %d (each of %d welcome emails and %d credits twice)\n", len(params), users, users)
	fmt.Printf("jobs completed:  %d\n", len(params))
	fmt.Printf("emails sent:     %d (Wrap: once per user)\n", welcome.sent.Load())
	fmt.Printf("cents credited:  %d (WrapTx: exactly %d credits of 100)\n", cents, cents/100)
	if welcome.sent.Load() != int64(users) || cents != int64(users)*100 {
		return fmt.Errorf("expected %d emails and %d cents", users, users*100)
	}
	return nil
}

// connect returns a pool whose connections use a new schema, and a function
// that drops it.
func connect(ctx context.Context, url string) (*pgxpool.Pool, string, func(), error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, "", nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	schema := "jobonce_example_" + hex.EncodeToString(b)
	admin, err := pgx.ConnectConfig(ctx, cfg.ConnConfig.Copy())
	if err != nil {
		return nil, "", nil, fmt.Errorf("postgres at %s: %w", url, err)
	}
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		_ = admin.Close(ctx)
		return nil, "", nil, err
	}
	drop := func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = admin.Exec(dctx, "DROP SCHEMA "+schema+" CASCADE")
		_ = admin.Close(dctx)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		drop()
		return nil, "", nil, err
	}
	return pool, schema, drop, nil
}
