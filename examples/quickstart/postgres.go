package main

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/pgstore"
)

// database is the PostgreSQL database of the transactional row: a schema of
// its own for the run, which holds jobonce's keys table and the effects
// table, and is dropped afterwards.
type database struct {
	url     string
	admin   *pgxpool.Pool
	schema  string
	effects string // the effects table, quoted
}

func openDatabase(ctx context.Context, url string) (*database, error) {
	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, err
	}
	d := &database{url: url, admin: admin, schema: "quickstart_" + randomID()}
	d.effects = pgx.Identifier{d.schema, "effects"}.Sanitize()
	_, err = admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{d.schema}.Sanitize()+
		"; CREATE TABLE "+d.effects+" (job int NOT NULL)")
	if err != nil {
		admin.Close()
		return nil, err
	}
	return d, nil
}

// close drops the run's schema.
func (d *database) close() {
	_, _ = d.admin.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{d.schema}.Sanitize()+" CASCADE")
	d.admin.Close()
}

// pool opens a pool of its own for one consumer, and cut, which drops its
// connections at once, as the death of the consumer's process would:
// PostgreSQL then rolls back their open transactions.
func (d *database) pool(ctx context.Context) (pool *pgxpool.Pool, cut func(), err error) {
	cfg, err := pgxpool.ParseConfig(d.url)
	if err != nil {
		return nil, nil, err
	}
	cfg.MaxConns = handlers // a transaction for every handler
	var mu sync.Mutex
	var conns []net.Conn
	dead := false
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		defer mu.Unlock()
		if dead {
			return nil, errKilled
		}
		conn, err := dial(ctx, network, addr)
		if err == nil {
			conns = append(conns, conn)
		}
		return conn, err
	}
	cut = func() {
		mu.Lock()
		defer mu.Unlock()
		dead = true
		for _, c := range conns {
			_ = c.Close()
		}
	}
	pool, err = pgxpool.NewWithConfig(ctx, cfg)
	return pool, cut, err
}

// txGuard returns the transactional mode of a Guard on pool.
func (d *database) txGuard(ctx context.Context, pool *pgxpool.Pool, cfg core.Config) (*core.TxGuard[pgx.Tx], error) {
	store, err := pgstore.New(ctx, pool, &pgstore.Config{Schema: d.schema, Migrate: true})
	if err != nil {
		return nil, err
	}
	// After a failed commit the TxGuard asks the store, within StoreTimeout,
	// whether it went through; the killed consumer asks its cut connections.
	cfg.StoreTimeout = time.Second
	guard, err := core.New(store, &cfg)
	if err != nil {
		return nil, err
	}
	return core.NewTxGuard[pgx.Tx](guard)
}

// insert makes job id's effect in tx.
func (d *database) insert(ctx context.Context, tx pgx.Tx, id int) error {
	_, err := tx.Exec(ctx, "INSERT INTO "+d.effects+" (job) VALUES ($1)", id)
	return err
}

// count sets made to the effects per job that PostgreSQL committed.
func (d *database) count(ctx context.Context, made []atomic.Int32) error {
	rows, _ := d.admin.Query(ctx, "SELECT job, count(*)::int FROM "+d.effects+" GROUP BY job")
	var job, n int32
	_, err := pgx.ForEachRow(rows, []any{&job, &n}, func() error {
		made[job].Store(n)
		return nil
	})
	return err
}
