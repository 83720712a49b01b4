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
	gap     atomic.Int64 // deliveries the killed consumer acted on and never acknowledged
	crash   sync.Once
}

// run works the queue with one strategy and counts the effects, showing
// label and its progress while it runs. It returns once the queue drained
// and the live consumers stopped; abandoned waits for the killed consumer's
// calls, which go on after the kill until they give up, to return.
func run(ctx context.Context, b backends, s strategy, label string) (r result, abandoned func(), err error) {
	t := &trial{prefix: "quickstart:" + randomID() + ":", q: newQueue(jobs, gap), effects: newEffects(jobs)}
	var closers []func()
	abandoned = func() {
		for _, c := range closers {
			c()
		}
	}
	defer func() {
		if err != nil {
			abandoned()
		}
	}()
	if s.postgres {
		db, err := openDatabase(ctx, b.pgURL)
		if err != nil {
			return result{}, abandoned, fmt.Errorf("DATABASE_URL: %w", err)
		}
		closers = append(closers, db.close)
		t.db = db
	}
	t.cs = make([]*consumer, consumers)
	for i := range t.cs {
		c, err := t.connect(ctx, b.redis)
		closers = append([]func(){c.close}, closers...) // before the database
		if err != nil {
			return result{}, abandoned, err
		}
		t.cs[i] = c
	}

	stop := showProgress(label, t.q.acked, t.q.deliveries)
	start := time.Now()
	for _, c := range t.cs {
		for range handlers {
			c.handlers.Go(func() { work(ctx, t.q, c, s.handle) })
		}
	}
	ok := t.q.wait(time.Minute)
	took := time.Since(start)
	for _, c := range t.cs {
		c.stop()
	}
	for _, c := range t.cs {
		if !c.killed.Load() { // the killed consumer's calls are abandoned, not waited for
			c.handlers.Wait()
		}
	}
	t.q.timers.Wait()
	stop()
	if !ok {
		return result{}, abandoned, fmt.Errorf("the queue did not drain within a minute")
	}
	if t.db != nil {
		if err := t.db.count(ctx, t.effects.made); err != nil {
			return result{}, abandoned, err
		}
	}
	r = t.effects.tally()
	r.gap, r.took = int(t.gap.Load()), took
	return r, abandoned, nil
}

func randomID() string {
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	return hex.EncodeToString(id)
}
