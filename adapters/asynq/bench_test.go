package asynqonce_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	asynqonce "github.com/jobonce/jobonce/adapters/asynq"
)

// BenchmarkServer measures no-op tasks per second through an Asynq server,
// plain and with the middleware, on the same Redis in the same run. Each
// iteration is one task: b.N distinct tasks are enqueued outside the timer,
// then a server with concurrency 16 drains the queue.
func BenchmarkServer(b *testing.B) {
	for _, variant := range []string{"plain", "jobonce"} {
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
			if variant == "jobonce" {
				g, _ := newGuard(b, nil)
				h = asynqonce.Middleware(g, nil)(h)
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
