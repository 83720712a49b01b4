// Command quickstart shows jobonce absorbing duplicate deliveries. It runs the
// experiment behind jobonce's design on a small in-process queue: every job is
// delivered twice, three consumers of twenty handlers each work the queue, one
// consumer is killed mid-run, and each strategy's duplicate effects and
// missing jobs are counted.
//
//	go -C examples run ./quickstart
//
// It uses an embedded Redis (miniredis) unless REDIS_URL names a real one.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
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
	if url == "" {
		mr := miniredis.NewMiniRedis()
		if err := mr.Start(); err != nil {
			log.Fatal(err)
		}
		defer mr.Close()
		stop := runClock(mr)
		defer stop()
		url, where = "redis://"+mr.Addr(), "embedded miniredis; set REDIS_URL to use a real Redis"
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		log.Fatalf("REDIS_URL: %v", err)
	}
	fmt.Printf("%d jobs, each delivered twice; %d consumers x %d handlers; one consumer killed mid-run\n", jobs, consumers, handlers)
	fmt.Printf("Redis: %s\n\n", where)
	fmt.Printf("%-40s %8s %18s %13s %9s\n", "strategy", "effects", "duplicate effects", "missing jobs", "took")
	for _, s := range strategies() {
		start := time.Now()
		r, err := run(context.Background(), opt, s)
		if err != nil {
			log.Fatalf("%s: %v", s.name, err)
		}
		fmt.Printf("%-40s %8d %18d %13d %9s\n", s.name, r.effects, r.duplicates, r.missing, time.Since(start).Round(10*time.Millisecond))
	}
	fmt.Print(`
Checking a done marker lets copies that check at the same moment both act; a claim
without a lease outlives the killed consumer, so its jobs are never done. jobonce's
lease expires with the dead consumer and a later copy runs; its one remaining risk is
a kill landing between an effect and its done marker (an occasional duplicate here).
The transactional mode (core.TxGuard on core/pgstore) commits the key with a database effect in
one Postgres transaction and closes that gap: exactly once.
`)
}

// runClock advances miniredis's clock with the wall clock, so TTLs expire.
func runClock(mr *miniredis.Miniredis) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				mr.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	return func() { close(done); <-finished }
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}
