package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// backends are the servers the rows use.
type backends struct {
	redis *redis.Options
	pgURL string // "" without DATABASE_URL
}

// skips reports whether s needs a server b does not have.
func (b backends) skips(s strategy) bool { return s.postgres && b.pgURL == "" }

// trial is one row's run: its queue, its consumers and the effects they made.
type trial struct {
	prefix  string
	q       *queue
	cs      []*consumer
	effects *effects
	db      *database // the transactional row only
	made    atomic.Int64
	crash   sync.Once
}

// run works the queue with one strategy and counts the effects, showing
// label and its progress while it runs.
func run(ctx context.Context, b backends, s strategy, label string) (result, error) {
	t := &trial{prefix: "quickstart:" + randomID() + ":", q: newQueue(jobs, gap), effects: newEffects(jobs)}
	if s.postgres {
		db, err := openDatabase(ctx, b.pgURL)
		if err != nil {
			return result{}, fmt.Errorf("DATABASE_URL: %w", err)
		}
		defer db.close()
		t.db = db
	}
	t.cs = make([]*consumer, consumers)
	for i := range t.cs {
		c, err := t.connect(ctx, b.redis)
		defer c.close()
		if err != nil {
			return result{}, err
		}
		t.cs[i] = c
	}

	stop := showProgress(label, t.q.acked, t.q.deliveries)
	var wg sync.WaitGroup
	for _, c := range t.cs {
		for range handlers {
			wg.Go(func() { work(ctx, t.q, c, s.handle) })
		}
	}
	ok := t.q.wait(time.Minute)
	for _, c := range t.cs {
		if !c.isDead() {
			close(c.dead)
		}
	}
	wg.Wait()
	t.q.timers.Wait()
	stop()
	if !ok {
		return result{}, fmt.Errorf("the queue did not drain")
	}
	if t.db != nil {
		if err := t.db.count(ctx, t.effects.made); err != nil {
			return result{}, err
		}
	}
	return t.effects.tally(), nil
}

func randomID() string {
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	return hex.EncodeToString(id)
}
