package backends_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	watermillonce "github.com/jobonce/jobonce/adapters/watermill"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/pgstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

const (
	workTime   = 50 * time.Millisecond // a job's own work, before its effect
	crashLease = 3 * time.Second
	// txWait bounds how long the transactional handler waits in the
	// handler for a copy whose transaction holds the key, as the
	// middleware's WaitRunning does.
	txWait = 10 * time.Second
)

// crashStrategy is one row of the experiment's table: how a worker process
// handles a message, the figures the published experiment gave for it, and
// what the test asserts of its tally.
type crashStrategy struct {
	name      string
	published string
	tx        bool // needs the keys table in PostgreSQL
	leased    bool // a leased claim and a separate done marker: the gap applies
	// handle returns the worker's router middleware (nil for none) and
	// handler.
	handle func(c *consumer) (message.HandlerMiddleware, message.NoPublishHandlerFunc)
	check  func(t *testing.T, r crashRow, size crashSize)
}

// consumer is one worker process of a crash test: its connections, and
// the outcomes its Guard observed.
type consumer struct {
	t    *testing.T
	spec crashSpec
	rdb  *redis.Client
	pool *pgxpool.Pool
	outs testenv.Outcomes
	// working counts the handlers inside a job's work, before its effect.
	working atomic.Int64
}

// act does the job's work, then its effect in db, sent with idem when it is
// not empty.
func (c *consumer) act(ctx context.Context, db execer, msg *message.Message, idem string) error {
	job, err := strconv.Atoi(string(msg.Payload))
	if err != nil {
		return err
	}
	c.working.Add(1)
	time.Sleep(workTime)
	c.working.Add(-1)
	applied, err := insertEffect(ctx, db, job, c.spec.Worker, idem)
	if err == nil && !applied {
		c.rdb.Incr(ctx, c.spec.Prefix+"absorbed")
	}
	return err
}

// readyToBeKilled prints "ready to be killed" once spec.KillAfter effects
// are made and at least half of c's handlers are inside a job's work (or,
// a second later, at least one), so that the kill takes out jobs in the
// middle of their run.
func (c *consumer) readyToBeKilled(ctx context.Context) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var reached time.Time // when the effects first reached KillAfter
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		working := c.working.Load()
		if working == 0 {
			continue
		}
		if reached.IsZero() {
			if n, _, err := effectCounts(ctx, c.pool, 0); err != nil || n < c.spec.KillAfter {
				continue
			}
			reached = time.Now()
		}
		// Half the handlers inside a job's work, or, if a stopped or slow
		// process never shows that many at once, any.
		if working >= int64(c.spec.Handlers/2) || time.Since(reached) > time.Second {
			fmt.Println("ready to be killed")
			return
		}
	}
}

// guard returns a Guard on the test Redis under the test's prefix, shared
// by the worker processes.
func (c *consumer) guard() *core.Guard {
	return testenv.RedisGuardOn(c.t, c.rdb, c.spec.Prefix, &core.Config{
		Lease: crashLease, MaxRetryAfter: 200 * time.Millisecond, Observer: c.outs.Observe,
	})
}

// middleware is watermillonce's middleware on c's Guard.
func (c *consumer) middleware() message.HandlerMiddleware {
	return watermillonce.MustMiddleware(c.guard(), nil)
}

// jobonceRow is the strategy the crash tests on other backends run.
const jobonceRow = "jobonce: leased claim + done marker"

var errNoIdempotencyKey = errors.New("no idempotency key in the message's context")

var crashStrategies = []crashStrategy{
	{
		name: "none", published: "3,000 duplicates",
		handle: func(c *consumer) (message.HandlerMiddleware, message.NoPublishHandlerFunc) {
			return nil, func(msg *message.Message) error { return c.act(msg.Context(), c.pool, msg, "") }
		},
		check: func(t *testing.T, r crashRow, size crashSize) {
			require.Zero(t, r.missing, "missing jobs")
			require.GreaterOrEqual(t, r.duplicates, size.jobs, "every job's two copies both act")
		},
	},
	{
		name: "check a done marker, then act", published: "2,101 duplicates",
		handle: func(c *consumer) (message.HandlerMiddleware, message.NoPublishHandlerFunc) {
			return nil, func(msg *message.Message) error {
				ctx := msg.Context()
				done := c.spec.Prefix + "done:" + string(msg.Payload)
				n, err := c.rdb.Exists(ctx, done).Result()
				if err != nil || n == 1 {
					return err
				}
				if err := c.act(ctx, c.pool, msg, ""); err != nil {
					return err
				}
				return c.rdb.Set(ctx, done, 1, time.Hour).Err()
			}
		},
		check: func(t *testing.T, r crashRow, _ crashSize) {
			require.Zero(t, r.missing, "the marker is set after the effect: no job is lost")
		},
	},
	{
		name: "claim with SET NX (no lease), then act", published: "0 duplicates, 15-20 missing",
		handle: func(c *consumer) (message.HandlerMiddleware, message.NoPublishHandlerFunc) {
			return nil, func(msg *message.Message) error {
				ctx := msg.Context()
				ok, err := c.rdb.SetNX(ctx, c.spec.Prefix+"claim:"+string(msg.Payload), 1, time.Hour).Result()
				if err != nil || !ok {
					return err // claimed by someone: assumed handled
				}
				return c.act(ctx, c.pool, msg, "")
			}
		},
		check: func(t *testing.T, r crashRow, size crashSize) {
			require.Zero(t, r.duplicates, "a claim without a lease never lets a second copy act")
			require.Positive(t, r.missing, "the killed worker's claims outlive it: its jobs in flight are lost")
			require.LessOrEqual(t, r.missing, size.handlers, "only the killed worker's jobs in flight are lost")
		},
	},
	{
		name: jobonceRow, published: "0 duplicates, 0 missing", leased: true,
		handle: func(c *consumer) (message.HandlerMiddleware, message.NoPublishHandlerFunc) {
			return c.middleware(), func(msg *message.Message) error { return c.act(msg.Context(), c.pool, msg, "") }
		},
		check: func(t *testing.T, r crashRow, size crashSize) {
			require.Zero(t, r.missing, "missing jobs")
			require.Zero(t, r.strayDuplicates, "duplicates outside the killed worker's effect-to-marker gap")
			require.LessOrEqual(t, r.gap, size.handlers, "at most one job per handler of the killed worker in the gap")
		},
	},
	{
		name: "jobonce + idempotency key at the effect", published: "not published", leased: true,
		handle: func(c *consumer) (message.HandlerMiddleware, message.NoPublishHandlerFunc) {
			return c.middleware(), func(msg *message.Message) error {
				key, ok := core.IdempotencyKey(msg.Context()) // the same for every copy of the job
				if !ok {
					return errNoIdempotencyKey
				}
				return c.act(msg.Context(), c.pool, msg, key)
			}
		},
		check: func(t *testing.T, r crashRow, _ crashSize) {
			require.Zero(t, r.missing, "missing jobs")
			require.Zero(t, r.duplicates, "duplicate effects")
		},
	},
	{
		name: "jobonce transactional (pgstore TxGuard)", published: "not published", tx: true,
		handle: func(c *consumer) (message.HandlerMiddleware, message.NoPublishHandlerFunc) {
			store, err := pgstore.New(context.Background(), c.pool, nil)
			require.NoError(c.t, err)
			tg, err := core.NewTxGuard[pgx.Tx](testenv.NewGuard(c.t, store, &core.Config{KeyPrefix: c.spec.Prefix, Observer: c.outs.Observe}))
			require.NoError(c.t, err)
			return nil, func(msg *message.Message) error {
				ctx := msg.Context()
				until := time.Now().Add(txWait)
				for {
					_, err := tg.Do(ctx, "effect:"+string(msg.Payload), func(ctx context.Context, tx pgx.Tx) error {
						return c.act(ctx, tx, msg, "") // committed with the key, or not at all
					})
					d, running := core.RetryAfter(err)
					if !running || time.Now().Add(d).After(until) {
						return err
					}
					select {
					case <-ctx.Done():
						return ctx.Err()
					case <-time.After(d):
					}
				}
			}
		},
		check: func(t *testing.T, r crashRow, _ crashSize) {
			require.Zero(t, r.missing, "missing jobs")
			require.Zero(t, r.duplicates, "duplicate effects")
		},
	},
}

// strategyNamed returns the strategy called name.
func strategyNamed(t *testing.T, name string) crashStrategy {
	for _, s := range crashStrategies {
		if s.name == name {
			return s
		}
	}
	t.Fatalf("no crash strategy %q", name)
	return crashStrategy{}
}
