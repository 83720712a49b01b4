package riveronce

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
)

type noopArgs struct {
	N int `json:"n"`
}

func (noopArgs) Kind() string { return "riveronce_noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// BenchmarkNoOpJobs works b.N no-op jobs through a River client on
// PostgreSQL, plain and with the middleware on Redis, side by side.
// Settings: FetchCooldown 1ms, FetchPollInterval 50ms, MaxWorkers 100, one
// client, jobs inserted before the clock starts.
func BenchmarkNoOpJobs(b *testing.B) {
	b.Run("plain", func(b *testing.B) { benchNoOp(b, nil) })
	b.Run("middleware", func(b *testing.B) {
		b.StopTimer()
		g := redisGuard(b, nil)
		benchNoOp(b, []rivertype.Middleware{Middleware(g, nil)})
	})
	b.Run("middleware-unbatched", func(b *testing.B) {
		b.StopTimer()
		g := redisGuard(b, nil)
		benchNoOp(b, []rivertype.Middleware{Middleware(g, &Config{MaxBatch: 1})})
	})
}

func benchNoOp(b *testing.B, mw []rivertype.Middleware) {
	b.ReportAllocs()
	b.StopTimer()
	pool, schema := riverSchema(b)
	ctx := context.Background()
	inserter := insertClient(b, pool, schema)
	const chunk = 5000
	for i := 0; i < b.N; i += chunk {
		params := make([]river.InsertManyParams, 0, chunk)
		for j := i; j < min(i+chunk, b.N); j++ {
			params = append(params, river.InsertManyParams{Args: noopArgs{N: j}})
		}
		_, err := inserter.InsertManyFast(ctx, params)
		require.NoError(b, err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, noopWorker{})
	cfg := clientConfig(schema, workers, 100)
	cfg.FetchCooldown = time.Millisecond
	cfg.Middleware = mw
	client, err := river.NewClient(riverDriver(pool), cfg)
	require.NoError(b, err)
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: b.N + 1000, Kinds: []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed},
	})
	defer cancel()

	b.StartTimer()
	cpu := processCPU()
	start := time.Now()
	require.NoError(b, client.Start(ctx))
	for range b.N {
		ev := <-events
		if ev.Kind != river.EventKindJobCompleted {
			b.Fatalf("job %d: %s", ev.Job.ID, ev.Kind)
		}
	}
	elapsed := time.Since(start)
	cpu = processCPU() - cpu
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/job")
	stop, cancelStop := context.WithTimeout(ctx, 10*time.Second)
	defer cancelStop()
	require.NoError(b, client.Stop(stop))
}
