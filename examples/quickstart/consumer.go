package main

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/redisstore"
)

// consumer is one worker process: its own connections and Guards, and a
// dead channel closed when it is killed.
type consumer struct {
	t      *trial
	client *redis.Client
	guard  *core.Guard
	pool   *pgxpool.Pool         // the transactional row only, as are txg and cut
	txg    *core.TxGuard[pgx.Tx] // a Guard on pool, in its transactional mode
	cut    func()                // drops pool's connections
	dead   chan struct{}
}

func (c *consumer) isDead() bool {
	select {
	case <-c.dead:
		return true
	default:
		return false
	}
}

// kill stops c as a crash would: its handlers stop and its connections drop.
func (c *consumer) kill() {
	close(c.dead)
	_ = c.client.Close()
	if c.cut != nil {
		c.cut()
	}
}

// act does a job's own work and then, unless c was killed meanwhile, its
// effect; a third of the way in, it kills consumer 1.
func (c *consumer) act(effect func() error) error {
	time.Sleep(workTime)
	if c.isDead() {
		return errKilled // killed before the effect
	}
	if err := effect(); err != nil {
		return err
	}
	if c.t.made.Add(1) == jobs/3 {
		c.t.crash.Do(c.t.cs[1].kill)
	}
	return nil
}

// effect makes job id's effect, sending key with it when it is not empty.
func (c *consumer) effect(id int, key string) error {
	return c.act(func() error {
		c.t.effects.apply(id, key)
		return nil
	})
}

// insert makes job id's effect as a row inserted in tx.
func (c *consumer) insert(ctx context.Context, tx pgx.Tx, id int) error {
	return c.act(func() error { return c.t.db.insert(ctx, tx, id) })
}

// connect starts a consumer with its own connections: to Redis, and to
// PostgreSQL for the transactional row. Its Guards share the trial's key
// prefix.
func (t *trial) connect(ctx context.Context, opt *redis.Options) (*consumer, error) {
	c := &consumer{t: t, client: redis.NewClient(opt), dead: make(chan struct{})}
	cfg := &core.Config{Lease: lease, KeyPrefix: t.prefix, MaxRetryAfter: 200 * time.Millisecond}
	store, err := redisstore.New(c.client, &redisstore.Config{SkipEvictionCheck: true})
	if err != nil {
		return c, err
	}
	if c.guard, err = core.New(store, cfg); err != nil || t.db == nil {
		return c, err
	}
	if c.pool, c.cut, err = t.db.pool(ctx); err != nil {
		return c, err
	}
	c.txg, err = t.db.txGuard(ctx, c.pool, *cfg)
	return c, err
}

func (c *consumer) close() {
	_ = c.client.Close()
	if c.pool != nil {
		c.pool.Close()
	}
}

// work is one handler goroutine of consumer c.
func work(ctx context.Context, q *queue, c *consumer, h handle) {
	for {
		select {
		case <-c.dead:
			return
		case <-q.drained:
			return
		case id := <-q.ch:
			if c.isDead() {
				q.redeliver(id, visibility) // never handled: back after the visibility timeout
				return
			}
			ack, delay := h(ctx, c, id)
			switch {
			case c.isDead():
				q.redeliver(id, visibility) // abandoned mid-run by the crash
				return
			case ack:
				q.ack()
			default:
				q.redeliver(id, delay)
			}
		}
	}
}
