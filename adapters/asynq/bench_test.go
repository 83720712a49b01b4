package asynqonce_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	asynqonce "github.com/jobonce/jobonce/adapters/asynq"
	"github.com/jobonce/jobonce/internal/testenv"
)

// BenchmarkServer measures no-op tasks per second through an Asynq server,
// plain and with the middleware (and with it, batching off), on the same
// Redis in the same run. Each
// iteration is one task: b.N distinct tasks are enqueued outside the timer,
// then a server with concurrency 16 drains the queue.
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
			switch variant {
			case "jobonce", "unbatched":
				g, _ := newGuard(b, nil)
				h = asynqonce.Middleware(g, &asynqonce.Config{DisableBatching: variant == "unbatched"})(h)
			case "naive":
				h = naive(b, h)
			}
			cfg := e.serverConfig(16)
			srv := asynq.NewServer(e.opt, cfg)
			b.ResetTimer()
			start := time.Now()
			if err := srv.Start(h); err != nil {
				b.Fatal(err)
			}
			select {
			case <-done:
			case <-time.After(5 * time.Minute):
				b.Fatal("tasks did not finish")
			}
			elapsed := time.Since(start)
			b.StopTimer()
			srv.Shutdown()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "tasks/s")
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

// BenchmarkHandler measures one task through the wrapped handler, called
// directly (no Asynq server), against the naive two-command middleware: the
// middleware's own cost per task.
func BenchmarkHandler(b *testing.B) {
	noop := asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })
	for _, variant := range []string{"naive", "jobonce"} {
		b.Run(variant, func(b *testing.B) {
			b.ReportAllocs()
			var h asynq.Handler
			if variant == "naive" {
				h = naive(b, noop)
			} else {
				g, _ := newGuard(b, nil)
				h = asynqonce.Middleware(g, nil)(noop)
			}
			tasks := make([]*asynq.Task, b.N)
			for i := range tasks {
				tasks[i] = asynq.NewTask("noop", []byte(strconv.Itoa(i)))
			}
			ctx := context.Background()
			b.ResetTimer()
			for i := range b.N {
				if err := h.ProcessTask(ctx, tasks[i]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
