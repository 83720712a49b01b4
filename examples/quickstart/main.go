// Command quickstart shows jobonce absorbing duplicate deliveries. It runs the
// experiment behind jobonce's design on a small in-process queue: every job is
// delivered twice, three consumers of twenty handlers each work the queue, one
// consumer is killed a third of the way in, and each strategy's effects,
// duplicate effects, missing jobs and crash gap (the deliveries the killed
// consumer had acted on but not acknowledged) are counted. The killed
// consumer's deliveries come back after the visibility timeout counted from
// the kill, as a real crash would hand them back. README.md shows the same
// table, which TestDemoTableAgreesWithTheREADME holds to the demo's run.
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
	if err := demo(os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "quickstart: %v\n", err)
		os.Exit(1)
	}
}

// demo runs every row the servers allow and prints the table to w. It
// silences the default slog logger and go-redis's logger: the killed
// consumer's calls fail loudly, by design.
func demo(w io.Writer) error {
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	redis.SetLogger(quietLogger{})
	url, where := os.Getenv("REDIS_URL"), "REDIS_URL"
	var mr *miniredis.Miniredis
	if url == "" {
		mr = miniredis.NewMiniRedis()
		if err := mr.Start(); err != nil {
			return err
		}
		defer mr.Close()
		stop := runClock(mr)
		defer stop()
		url, where = "redis://"+mr.Addr(), "embedded miniredis; set REDIS_URL to use a real Redis"
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		return fmt.Errorf("REDIS_URL: %w", err)
	}
	opt.ContextTimeoutEnabled = true
	b := backends{redis: opt, pgURL: os.Getenv("DATABASE_URL")}
	rows := strategies()
	n := 0
	for _, s := range rows {
		if !b.skips(s) {
			n++
		}
	}
	fmt.Fprintf(w, "%d jobs, each delivered twice; %d consumers x %d handlers; one consumer killed a third of the way in\n", jobs, consumers, handlers)
	fmt.Fprintf(w, "Redis: %s\n\n", where)
	printHeader(w)
	var abandoned []func()
	defer func() {
		for _, wait := range abandoned {
			wait()
		}
	}()
	i := 0
	for _, s := range rows {
		if b.skips(s) {
			fmt.Fprintf(w, "%-*s  skipped: set DATABASE_URL to a PostgreSQL database to run it\n", strategyWidth, s.name)
			continue
		}
		i++
		r, wait, err := run(context.Background(), b, s, fmt.Sprintf("row %d/%d, %s", i, n, s.name))
		abandoned = append(abandoned, wait)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		printRow(w, s.name, r)
		if r.keyed > 0 {
			fmt.Fprintf(w, "  (the API absorbed %d of %d requests, repeats of an idempotency key it had applied)\n", r.absorbed, r.keyed)
		}
		if mr != nil {
			mr.FlushAll() // runClock's FastForward walks every key: start each row empty
		}
	}
	fmt.Fprintln(w)
	printColumns(w)
	fmt.Fprint(w, conclusion)
	return nil
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
