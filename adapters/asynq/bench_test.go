package asynqonce_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	asynqonce "github.com/jobonce/jobonce/adapters/asynq"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/testenv"
)

// BenchmarkServer measures no-op tasks per second through an Asynq server,
// plain and with the middleware (with its defaults, without batching, and
// the naive two-command middleware for reference), on the same Redis in the
// same run.
// Each iteration is one task: b.N distinct tasks are enqueued outside the
// timer, then a server with concurrency 16 drains the queue. cpu-µs/task is
// the CPU time of this process (server and middleware) per task, and
// redis-cpu-µs/task the Redis server's (which includes other clients' load
// on a shared Redis): on a busy machine their sum, the cost of a task, is a
// steadier measure than tasks/s. For the middleware, marker-p50-µs and
// marker-p99-µs are the crash window: how long after the handler returned
// its task's done marker was written (see testenv.MarkerDelays).
func BenchmarkServer(b *testing.B) {
	for _, variant := range []string{"plain", "jobonce", "unbatched", "naive"} {
		b.Run(variant, func(b *testing.B) {
			b.ReportAllocs()
			e := newAsynqEnv(b)
			pipe := asynq.Queue(e.queue)
			for i := range b.N {
				if _, err := e.client.Enqueue(asynq.NewTask("noop", []byte(strconv.Itoa(i))), pipe); err != nil {
					b.Fatal(err)
				}
			}
			var n atomic.Int64
			done := make(chan struct{})
			var h asynq.Handler = asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
				if n.Add(1) == int64(b.N) {
					close(done)
				}
				return nil
			})
			var delays *testenv.MarkerDelays // the crash window, of the guarded variants
			switch variant {
			case "jobonce", "unbatched":
				delays = new(testenv.MarkerDelays)
				cfg := &core.Config{DisableBatching: variant == "unbatched", Observer: delays.Observe}
				inner := asynq.HandlerFunc(testenv.RecordReturns(delays, asynqonce.DefaultKey, h.ProcessTask))
				h = asynqonce.MustMiddleware(testenv.RedisGuard(b, cfg), nil)(inner)
			case "naive":
				h = naive(b, h)
			}
			cfg := e.serverConfig(16)
			srv := asynq.NewServer(e.opt, cfg)
			stats := testenv.Redis(b, "")
			b.ResetTimer()
			start, cpu, rcpu := time.Now(), testenv.ProcessCPU(), testenv.RedisCPU(b, stats)
			if err := srv.Start(h); err != nil {
				b.Fatal(err)
			}
			select {
			case <-done:
			case <-time.After(5 * time.Minute):
				b.Fatal("tasks did not finish")
			}
			elapsed, used, rused := time.Since(start), testenv.ProcessCPU()-cpu, testenv.RedisCPU(b, stats)-rcpu
			b.StopTimer()
			srv.Shutdown()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "tasks/s")
			b.ReportMetric(float64(used.Microseconds())/float64(b.N), "cpu-µs/task")
			b.ReportMetric(float64(rused.Microseconds())/float64(b.N), "redis-cpu-µs/task")
			if delays != nil {
				delays.Report(b, "")
			}
		})
	}
}

// naive is the reference two-command middleware: SET NX PX to claim, SET of
// a done marker after the handler (no token check, no heartbeat, no
// release).
func naive(b *testing.B, next asynq.Handler) asynq.Handler {
	prefix := testenv.Prefix(b)
	rdb := testenv.Redis(b, prefix)
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		key := prefix + asynqonce.DefaultKey(t)
		ok, err := rdb.SetNX(ctx, key, "running", 30*time.Second).Result()
		if err != nil || !ok {
			return fmt.Errorf("naive: claim: %v", err)
		}
		if err := next.ProcessTask(ctx, t); err != nil {
			return err
		}
		return rdb.Set(ctx, key, "done", 24*time.Hour).Err()
	})
}

// BenchmarkHandler measures tasks through the wrapped handler, called
// directly (no Asynq server), against the naive two-command middleware: the
// middleware's own cost per task, one task at a time (c1) and from 16
// goroutines (c16), where claims and done markers share round trips.
func BenchmarkHandler(b *testing.B) {
	noop := asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })
	for _, c := range []int{1, 16} {
		for _, variant := range []string{"naive", "unbatched", "jobonce"} {
			b.Run(fmt.Sprintf("c%d/%s", c, variant), func(b *testing.B) {
				b.ReportAllocs()
				var h asynq.Handler
				if variant == "naive" {
					h = naive(b, noop)
				} else {
					g := testenv.RedisGuard(b, &core.Config{DisableBatching: variant == "unbatched"})
					h = asynqonce.MustMiddleware(g, nil)(noop)
				}
				var next atomic.Int64
				ctx := context.Background()
				b.ResetTimer()
				var wg sync.WaitGroup
				for range c {
					wg.Go(func() {
						for n := next.Add(1); n <= int64(b.N); n = next.Add(1) {
							task := asynq.NewTask("noop", strconv.AppendInt(nil, n, 10))
							if err := h.ProcessTask(ctx, task); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
			})
		}
	}
}

// BenchmarkSettle measures how soon a duplicate settles under an Asynq
// server with the middleware's and Asynq's defaults (IsFailure and
// RetryDelay set, concurrency 16): each iteration is a pair of copies of one
// 200ms task enqueued together, all before the clock starts. settle-p50-ms
// and settle-p99-ms run from the first copy's Ran to the second's
// Duplicate (see testenv.Settles), and tasks/s is beside the same number of
// tasks without duplicates ("unique"). Run it with a small -benchtime, such
// as 20x.
func BenchmarkSettle(b *testing.B) {
	for _, variant := range []string{"unique", "pairs"} {
		b.Run(variant, func(b *testing.B) {
			e := newAsynqEnv(b)
			var settles testenv.Settles
			var ran atomic.Int64
			allRan := make(chan struct{})
			settles.Also = func(_ context.Context, ev core.Event) {
				if ev.Outcome == core.Ran && ran.Add(1) == int64(2*b.N) {
					close(allRan)
				}
			}
			g := testenv.RedisGuard(b, &core.Config{Observer: settles.Observe})
			h := asynqonce.MustMiddleware(g, nil)(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
				t := time.NewTimer(200 * time.Millisecond) // the job
				defer t.Stop()
				select {
				case <-t.C:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}))
			for i := range b.N {
				for c := range 2 {
					payload := "pair-" + strconv.Itoa(i)
					if variant == "unique" {
						payload += "-" + strconv.Itoa(c)
					}
					if _, err := e.client.Enqueue(asynq.NewTask("settle", []byte(payload)), asynq.Queue(e.queue)); err != nil {
						b.Fatal(err)
					}
				}
			}
			srv := asynq.NewServer(e.opt, asynq.Config{
				Concurrency:    16,
				Queues:         map[string]int{e.queue: 1},
				IsFailure:      asynqonce.IsFailure,
				RetryDelayFunc: asynqonce.RetryDelay,
				LogLevel:       asynq.ErrorLevel,
			})
			b.ResetTimer()
			start := time.Now()
			if err := srv.Start(h); err != nil {
				b.Fatal(err)
			}
			if variant == "unique" {
				select {
				case <-allRan:
				case <-time.After(5 * time.Minute):
					b.Fatal("tasks did not finish")
				}
			} else {
				settles.Wait(b, b.N, 5*time.Minute)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			srv.Shutdown()
			b.ReportMetric(float64(2*b.N)/elapsed.Seconds(), "tasks/s")
			if variant == "pairs" {
				settles.Report(b)
			}
		})
	}
}
