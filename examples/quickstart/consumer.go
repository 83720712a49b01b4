package main

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/redisstore"
)

// consumer is one worker process: its own connections and Guards, the
// deliveries its handlers hold, and a dead channel closed when it is killed.
type consumer struct {
	t      *trial
	client *redis.Client
	guard  *core.Guard
	pool   *pgxpool.Pool         // the transactional row only, as are txg and cut
	txg    *core.TxGuard[pgx.Tx] // a Guard on pool, in its transactional mode
	cut    func()                // drops pool's connections
	dead   chan struct{}

	// mu orders effects and the kill: act holds it shared while it makes an
	// effect, kill holds it alone, so every effect happens wholly before or
	// after the kill.
	mu       sync.RWMutex
	inflight map[*delivery]struct{} // guarded by mu
	handlers sync.WaitGroup         // this consumer's handler goroutines
	killed   atomic.Bool
}

// delivery is one delivery a handler holds.
type delivery struct {
	id    int
	acted bool // its effect was made; written under consumer.mu held shared, read under it held alone
}

func (c *consumer) isDead() bool {
	select {
	case <-c.dead:
		return true
	default:
		return false
	}
}

// kill stops c as a SIGKILL would: the deliveries its handlers hold come
// back after the visibility timeout, counted in the crash gap when their
// effect was made, and its connections drop. Its handlers' calls still in
// flight are abandoned: what they do afterwards reaches neither the queue
// nor, with the connections gone, any store.
func (c *consumer) kill() {
	c.mu.Lock()
	c.killed.Store(true)
	close(c.dead)
	for d := range c.inflight {
		if d.acted {
			c.t.gap.Add(1)
		}
		c.t.q.redeliver(d.id, visibility)
	}
	c.inflight = nil
	c.mu.Unlock()
	_ = c.client.Close()
	if c.cut != nil {
		c.cut()
	}
}

// stop ends c's handlers once the queue drained; a killed c is stopped
// already.
func (c *consumer) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.isDead() {
		close(c.dead)
	}
}

// hold records that a handler took d; false when c is dead.
func (c *consumer) hold(d *delivery) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isDead() {
		return false
	}
	c.inflight[d] = struct{}{}
	return true
}

// done removes d from the held deliveries once its handler answered; false
// when c was killed meanwhile (kill handed d back already).
func (c *consumer) done(d *delivery) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isDead() {
		return false
	}
	delete(c.inflight, d)
	return true
}

// act does a job's own work and then, unless c was killed meanwhile, its
// effect; a third of the way in, it kills consumer 1.
func (c *consumer) act(d *delivery, effect func() error) error {
	time.Sleep(workTime)
	c.mu.RLock()
	if c.isDead() {
		c.mu.RUnlock()
		return errKilled // killed before the effect
	}
	err := effect()
	if err == nil {
		d.acted = true
	}
	c.mu.RUnlock()
	if err == nil && c.t.made.Add(1) == jobs/3 {
		c.t.crash.Do(c.t.cs[1].kill)
	}
	return err
}

// effect makes job d's effect, sending key with it when it is not empty.
func (c *consumer) effect(d *delivery, key string) error {
	return c.act(d, func() error {
		c.t.effects.apply(d.id, key)
		return nil
	})
}

// insert makes job d's effect as a row inserted in tx.
func (c *consumer) insert(ctx context.Context, tx pgx.Tx, d *delivery) error {
	return c.act(d, func() error { return c.t.db.insert(ctx, tx, d.id) })
}

// connect starts a consumer with its own connections: to Redis, and to
// PostgreSQL for the transactional row. Its Guards share the trial's key
// prefix.
func (t *trial) connect(ctx context.Context, opt *redis.Options) (*consumer, error) {
	c := &consumer{t: t, client: redis.NewClient(opt), dead: make(chan struct{}), inflight: map[*delivery]struct{}{}}
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

// close waits for c's handlers to return, then closes its connections.
func (c *consumer) close() {
	c.handlers.Wait()
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
			d := &delivery{id: id}
			if !c.hold(d) {
				q.redeliver(id, visibility) // never handled: back after the visibility timeout
				return
			}
			ack, delay := h(ctx, c, d)
			switch {
			case !c.done(d):
				return // killed mid-run: kill handed the delivery back
			case ack:
				q.ack()
			default:
				q.redeliver(id, delay)
			}
		}
	}
}
