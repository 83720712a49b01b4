package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/redisstore"
)

// consumer is one worker process: its own Redis connection and Guard, and a
// dead channel closed when it is killed.
type consumer struct {
	client *redis.Client
	guard  *core.Guard
	dead   chan struct{}
	prefix string
	effect func(c *consumer, id int) bool
}

func (c *consumer) isDead() bool {
	select {
	case <-c.dead:
		return true
	default:
		return false
	}
}

// handle processes one delivery: ack reports whether the queue may forget it;
// otherwise it comes back after delay.
type handle func(ctx context.Context, c *consumer, id int) (ack bool, delay time.Duration)

type strategy struct {
	name   string
	handle handle
}

var errKilled = errors.New("consumer killed")

func strategies() []strategy {
	return []strategy{
		{"none", func(_ context.Context, c *consumer, id int) (bool, time.Duration) {
			return c.effect(c, id), 0
		}},
		{"check a done marker, then act", func(ctx context.Context, c *consumer, id int) (bool, time.Duration) {
			done := c.prefix + "done:" + strconv.Itoa(id)
			n, err := c.client.Exists(ctx, done).Result()
			if err != nil {
				return false, 50 * time.Millisecond
			}
			if n == 1 {
				return true, 0
			}
			if !c.effect(c, id) {
				return false, 0
			}
			c.client.Set(ctx, done, 1, time.Hour)
			return true, 0
		}},
		{"claim with SET NX (no lease), then act", func(ctx context.Context, c *consumer, id int) (bool, time.Duration) {
			ok, err := c.client.SetNX(ctx, c.prefix+"claim:"+strconv.Itoa(id), 1, time.Hour).Result()
			if err != nil {
				return false, 50 * time.Millisecond
			}
			if !ok {
				return true, 0 // someone claimed it: assume it is handled
			}
			return c.effect(c, id), 0
		}},
		{"jobonce: leased claim + done marker", func(ctx context.Context, c *consumer, id int) (bool, time.Duration) {
			_, err := c.guard.Do(ctx, "job:"+strconv.Itoa(id), func(context.Context) error {
				if !c.effect(c, id) {
					return errKilled
				}
				return nil
			})
			if d, running := core.RetryAfter(err); running {
				return false, d // another copy runs it: try again later, no failure
			}
			return err == nil, 50 * time.Millisecond
		}},
	}
}

type result struct{ effects, duplicates, missing int }

// run works the queue with one strategy and counts the effects.
func run(ctx context.Context, opt *redis.Options, s strategy) (result, error) {
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	prefix := "quickstart:" + hex.EncodeToString(id) + ":"
	effects := make([]atomic.Int32, jobs)
	q := newQueue(jobs, gap)

	var handled atomic.Int64
	var crash sync.Once
	cs := make([]*consumer, consumers)
	for i := range cs {
		client := redis.NewClient(opt)
		defer client.Close()
		store, err := redisstore.New(client, &redisstore.Config{SkipEvictionCheck: true})
		if err != nil {
			return result{}, err
		}
		guard, err := core.New(store, &core.Config{Lease: lease, KeyPrefix: prefix, MaxRetryAfter: 200 * time.Millisecond})
		if err != nil {
			return result{}, err
		}
		cs[i] = &consumer{client: client, guard: guard, dead: make(chan struct{}), prefix: prefix,
			effect: func(c *consumer, id int) bool {
				time.Sleep(workTime) // the job's own work
				if c.isDead() {
					return false // killed before the effect
				}
				effects[id].Add(1)
				if handled.Add(1) == jobs/3 {
					crash.Do(func() { // kill consumer 1 a third of the way in
						close(cs[1].dead)
						_ = cs[1].client.Close()
					})
				}
				return true
			}}
	}

	var wg sync.WaitGroup
	for _, c := range cs {
		for range handlers {
			wg.Go(func() { work(ctx, q, c, s.handle) })
		}
	}
	ok := q.wait(time.Minute)
	for _, c := range cs {
		if !c.isDead() {
			close(c.dead)
		}
	}
	wg.Wait()
	q.timers.Wait()
	if !ok {
		return result{}, fmt.Errorf("the queue did not drain")
	}
	var r result
	for i := range effects {
		n := int(effects[i].Load())
		r.effects += n
		if n == 0 {
			r.missing++
		} else {
			r.duplicates += n - 1
		}
	}
	return r, nil
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
