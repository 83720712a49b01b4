// Command quickstart shows jobonce absorbing duplicate deliveries. It runs the
// experiment behind jobonce's design on a small in-process queue: every job is
// delivered twice, three consumers of twenty handlers each work the queue, one
// consumer is killed mid-run, and each strategy's duplicate effects and
// missing jobs are counted.
//
//	go -C examples run ./quickstart
//
// It uses an embedded Redis (miniredis) unless REDIS_URL names a real one.
// The transactional row runs when DATABASE_URL names a PostgreSQL database,
// in a schema of its own that it drops afterwards.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

const (
	jobs       = 2000
	gap        = 20 // the second copy of a job arrives this many deliveries later
	consumers  = 3
	handlers   = 20
	workTime   = 2 * time.Millisecond // how long one effect takes
	visibility = 500 * time.Millisecond
	lease      = time.Second
)

func main() {
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	redis.SetLogger(quietLogger{})
	url, where := os.Getenv("REDIS_URL"), "REDIS_URL"
	var mr *miniredis.Miniredis
	if url == "" {
		mr = miniredis.NewMiniRedis()
		if err := mr.Start(); err != nil {
			fail("%v", err)
		}
		defer mr.Close()
		stop := runClock(mr)
		defer stop()
		url, where = "redis://"+mr.Addr(), "embedded miniredis; set REDIS_URL to use a real Redis"
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		fail("REDIS_URL: %v", err)
	}
	opt.ContextTimeoutEnabled = true // calls end with their context, not after ReadTimeout
	b := backends{redis: opt, pgURL: os.Getenv("DATABASE_URL")}
	rows := strategies()
	n := 0
	for _, s := range rows {
		if !b.skips(s) {
			n++
		}
	}
	fmt.Printf("%d jobs, each delivered twice; %d consumers x %d handlers; one consumer killed mid-run\n", jobs, consumers, handlers)
	fmt.Printf("Redis: %s\n\n", where)
	fmt.Printf("%-40s %8s %18s %13s %9s\n", "strategy", "effects", "duplicate effects", "missing jobs", "took")
	i := 0
	for _, s := range rows {
		if b.skips(s) {
			fmt.Printf("%-40s skipped: set DATABASE_URL to a PostgreSQL database to run it\n", s.name)
			continue
		}
		i++
		start := time.Now()
		r, err := run(context.Background(), b, s, fmt.Sprintf("row %d/%d, %s", i, n, s.name))
		if err != nil {
			fail("%s: %v", s.name, err)
		}
		fmt.Printf("%-40s %8d %18d %13d %9s\n", s.name, r.effects, r.duplicates, r.missing, time.Since(start).Round(10*time.Millisecond))
		if r.keyed > 0 {
			fmt.Printf("  (the API absorbed %d of %d requests, repeats of an idempotency key it had applied)\n", r.absorbed, r.keyed)
		}
		if mr != nil {
			mr.FlushAll() // runClock's FastForward walks every key: start each row empty
		}
	}
	fmt.Print(`
Copies that check a done marker at the same moment both act. A claim without a lease
outlives the killed consumer, so its jobs are never done. jobonce's lease expires with
the dead consumer and a later copy runs; only a kill between an effect and its done
marker repeats the effect, unless the API refuses a repeated idempotency key or one
transaction commits the key with the effect (a kill rolls both back).

Which row fits which effect:
  a write to the database that keeps the keys  transactional (core.TxGuard): exactly once
  an API that accepts idempotency keys         jobonce + core.IdempotencyKey: repeats absorbed there
  an external effect without one               jobonce alone: a rare duplicate on a crash
  one where skipping beats repeating           a claim with no lease: at most once
`)
}

// runClock advances miniredis's clock with the wall clock, so TTLs expire.
func runClock(mr *miniredis.Miniredis) (stop func()) {
	last := time.Now()
	return every(5*time.Millisecond, func() {
		now := time.Now()
		mr.FastForward(now.Sub(last))
		last = now
	})
}

// every calls fn every period, in a goroutine of its own, until stop; stop
// waits for the goroutine to return.
func every(period time.Duration, fn func()) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fn()
			}
		}
	}()
	return func() { close(done); <-finished }
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// fail reports err and exits: the log package's output goes to slog, which
// this program silences.
func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "quickstart: "+format+"\n", args...)
	os.Exit(1)
}
