package main

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobonce/jobonce/core"
)

// handle processes one delivery: ack reports whether the queue may forget it;
// otherwise it comes back after delay.
type handle func(ctx context.Context, c *consumer, d *delivery) (ack bool, delay time.Duration)

// strategy is one row of the table.
type strategy struct {
	name     string
	handle   handle
	postgres bool // the row needs DATABASE_URL
}

var errKilled = errors.New("consumer killed")

func strategies() []strategy {
	return []strategy{
		{name: "none", handle: func(_ context.Context, c *consumer, d *delivery) (bool, time.Duration) {
			return c.effect(d, "") == nil, 0
		}},
		{name: "check a done marker, then act", handle: func(ctx context.Context, c *consumer, d *delivery) (bool, time.Duration) {
			done := c.t.prefix + "done:" + strconv.Itoa(d.id)
			n, err := c.client.Exists(ctx, done).Result()
			if err != nil {
				return false, 50 * time.Millisecond
			}
			if n == 1 {
				return true, 0
			}
			if c.effect(d, "") != nil {
				return false, 0
			}
			c.client.Set(ctx, done, 1, time.Hour)
			return true, 0
		}},
		{name: "claim with SET NX (no lease), then act", handle: func(ctx context.Context, c *consumer, d *delivery) (bool, time.Duration) {
			ok, err := c.client.SetNX(ctx, c.t.prefix+"claim:"+strconv.Itoa(d.id), 1, time.Hour).Result()
			if err != nil {
				return false, 50 * time.Millisecond
			}
			if !ok {
				return true, 0 // someone claimed it: assume it is handled
			}
			return c.effect(d, "") == nil, 0
		}},
		{name: "jobonce: leased claim + done marker", handle: func(ctx context.Context, c *consumer, d *delivery) (bool, time.Duration) {
			_, err := c.guard.Do(ctx, jobKey(d.id), func(context.Context) error {
				return c.effect(d, "")
			})
			return settle(err)
		}},
		{name: "jobonce + idempotency key at the effect", handle: func(ctx context.Context, c *consumer, d *delivery) (bool, time.Duration) {
			_, err := c.guard.Do(ctx, jobKey(d.id), func(ctx context.Context) error {
				key, _ := core.IdempotencyKey(ctx) // the same for every copy of the job
				return c.effect(d, key)
			})
			return settle(err)
		}},
		{name: "jobonce transactional (pgstore TxGuard)", postgres: true, handle: func(ctx context.Context, c *consumer, d *delivery) (bool, time.Duration) {
			_, err := c.txg.Do(ctx, jobKey(d.id), func(ctx context.Context, tx pgx.Tx) error {
				return c.insert(ctx, tx, d) // committed with the key, or not at all
			})
			return settle(err)
		}},
	}
}

func jobKey(id int) string { return "job:" + strconv.Itoa(id) }

// settle answers the queue after a Guard's call: a copy that found its job
// running comes back when the Guard suggests, a failure a little later.
func settle(err error) (ack bool, delay time.Duration) {
	if d, running := core.RetryAfter(err); running {
		return false, d // another copy runs it: try again later, no failure
	}
	return err == nil, 50 * time.Millisecond
}
