package riveronce

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/pgstore"
	"github.com/jobonce/jobonce/internal/testenv"
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
// PostgreSQL, side by side: plain; with the middleware on Redis (batched,
// the default); with batching off; and with a naive two-command middleware
// for reference. Settings: FetchCooldown 1ms, FetchPollInterval 50ms,
// MaxWorkers 100, one client, jobs inserted before the clock starts. It
// reports jobs/s, the CPU time this process and the Redis server used per
// job (redis-cpu-µs/job includes other clients' load on a shared Redis),
// and for the
// middleware the crash window: marker-p50-µs and marker-p99-µs, how long
// after the worker returned its job's done marker was written (see
// testenv.MarkerDelays).
func BenchmarkNoOpJobs(b *testing.B) {
	b.Run("plain", func(b *testing.B) { benchNoOp(b, nil, nil) })
	for _, variant := range []string{"middleware", "middleware-unbatched"} {
		b.Run(variant, func(b *testing.B) {
			b.StopTimer()
			delays := new(testenv.MarkerDelays)
			g := testenv.RedisGuard(b, &core.Config{DisableBatching: variant == "middleware-unbatched", Observer: delays.Observe})
			benchNoOp(b, []rivertype.Middleware{MustMiddleware(g, nil)}, delays)
		})
	}
	b.Run("naive", func(b *testing.B) {
		b.StopTimer()
		prefix := testenv.Prefix(b)
		benchNoOp(b, []rivertype.Middleware{&naiveMiddleware{rdb: testenv.Redis(b, prefix), prefix: prefix}}, nil)
	})
}

// noopKey is the middleware's default key of a no-op job.
func noopKey(job *river.Job[noopArgs]) string {
	return job.Kind + ":" + core.Fingerprint(job.EncodedArgs)
}

// naiveMiddleware is the reference the design measures against: two plain
// Redis commands per job, SET NX with a lease before and SET of a done
// marker after, with no heartbeat, no token check and no batching.
type naiveMiddleware struct {
	river.MiddlewareDefaults
	rdb    *redis.Client
	prefix string
}

func (m *naiveMiddleware) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	key := m.prefix + job.Kind + ":" + core.Fingerprint(job.EncodedArgs)
	ok, err := m.rdb.SetNX(ctx, key, "running", 30*time.Second).Result()
	if err != nil {
		return err
	}
	if !ok {
		return river.JobSnooze(time.Second)
	}
	if err := doInner(ctx); err != nil {
		m.rdb.Del(context.WithoutCancel(ctx), key)
		return err
	}
	return m.rdb.Set(context.WithoutCancel(ctx), key, "done", 24*time.Hour).Err()
}

// benchNoOp works b.N no-op jobs through mw; with delays set, it records
// their crash window there and reports it.
func benchNoOp(b *testing.B, mw []rivertype.Middleware, delays *testenv.MarkerDelays) {
	b.ReportAllocs()
	b.StopTimer()
	ctx := context.Background()
	client, events, cancel := noOpClient(b, mw, delays)
	defer cancel()

	stats := testenv.Redis(b, "")
	b.StartTimer()
	cpu, rcpu := testenv.ProcessCPU(), testenv.RedisCPU(b, stats)
	start := time.Now()
	require.NoError(b, client.Start(ctx))
	for range b.N {
		<-events
	}
	elapsed := time.Since(start)
	cpu, rcpu = testenv.ProcessCPU()-cpu, testenv.RedisCPU(b, stats)-rcpu
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/job")
	b.ReportMetric(float64(rcpu.Microseconds())/float64(b.N), "redis-cpu-µs/job")
	if delays != nil {
		delays.Report(b, "")
	}
	stop, cancelStop := context.WithTimeout(ctx, 10*time.Second)
	defer cancelStop()
	require.NoError(b, client.Stop(stop))
}

// noOpClient returns a client, not started, on a schema of its own holding
// b.N no-op jobs, and its completion events. With delays set, the worker
// records its returns there.
func noOpClient(b *testing.B, mw []rivertype.Middleware, delays *testenv.MarkerDelays) (*river.Client[pgx.Tx], <-chan *river.Event, func()) {
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
	var worker river.Worker[noopArgs] = noopWorker{}
	if delays != nil {
		worker = river.WorkFunc(testenv.RecordReturns(delays, noopKey, worker.Work))
	}
	river.AddWorker(workers, worker)
	cfg := clientConfig(schema, workers, 100)
	cfg.FetchCooldown = time.Millisecond
	cfg.Middleware = mw
	client, err := river.NewClient(riverDriver(pool), cfg)
	require.NoError(b, err)
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: b.N + 1000, Kinds: []river.EventKind{river.EventKindJobCompleted},
	})
	return client, events, cancel
}

// BenchmarkWork measures the middleware alone, without River: b.N jobs with
// distinct args through Middleware.Work from 100 goroutines, on the test
// Redis, next to calling the job directly. It reports the CPU time this
// process used per job.
func BenchmarkWork(b *testing.B) {
	run := func(b *testing.B, work func(ctx context.Context, row *rivertype.JobRow, doInner func(context.Context) error) error) {
		b.ReportAllocs()
		b.SetParallelism(50)
		var n atomic.Int64
		cpu := testenv.ProcessCPU()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := n.Add(1)
				row := &rivertype.JobRow{ID: i, Kind: "riveronce_noop", EncodedArgs: strconv.AppendInt([]byte(`{"n":`), i, 10), Metadata: []byte(`{}`)}
				if err := work(context.Background(), row, func(context.Context) error { return nil }); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.StopTimer()
		b.ReportMetric(float64((testenv.ProcessCPU()-cpu).Microseconds())/float64(b.N), "cpu-µs/job")
	}
	b.Run("plain", func(b *testing.B) {
		run(b, func(ctx context.Context, _ *rivertype.JobRow, doInner func(context.Context) error) error {
			return doInner(ctx)
		})
	})
	b.Run("middleware", func(b *testing.B) {
		run(b, MustMiddleware(testenv.RedisGuard(b, nil), nil).Work)
	})
	b.Run("middleware-unbatched", func(b *testing.B) {
		run(b, MustMiddleware(testenv.RedisGuard(b, &core.Config{DisableBatching: true}), nil).Work)
	})
}

type settleArgs struct {
	N int    `json:"n"`
	C string `json:"c"` // tells the copies of "unique" apart
}

func (settleArgs) Kind() string { return "riveronce_settle" }

// settleWorker's job takes 200ms.
type settleWorker struct {
	river.WorkerDefaults[settleArgs]
}

func (settleWorker) Work(ctx context.Context, _ *river.Job[settleArgs]) error {
	t := time.NewTimer(200 * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// BenchmarkSettle measures how soon a duplicate settles under a River
// client with River's and the middleware's defaults (FetchCooldown 100ms,
// FetchPollInterval 1s, MaxWorkers 16, one client), on a Guard on Redis and
// on one on PostgreSQL: each iteration is a pair of copies of one 200ms job
// inserted together, all before the clock starts. settle-p50-ms and
// settle-p99-ms run from the first copy's Ran to the second's Duplicate
// (see testenv.Settles), and jobs/s is beside the same number of jobs
// without duplicates ("unique"). Run it with a small -benchtime, such as
// 20x.
func BenchmarkSettle(b *testing.B) {
	for _, store := range []string{"redis", "postgres"} {
		for _, variant := range []string{"unique", "pairs"} {
			b.Run(store+"/"+variant, func(b *testing.B) { benchSettle(b, store, variant == "pairs") })
		}
	}
}

func benchSettle(b *testing.B, store string, pairs bool) {
	b.StopTimer()
	ctx := context.Background()
	pool, schema := riverSchema(b)
	var settles testenv.Settles
	var ran atomic.Int64
	allRan := make(chan struct{})
	settles.Also = func(_ context.Context, ev core.Event) {
		if ev.Outcome == core.Ran && ran.Add(1) == int64(2*b.N) {
			close(allRan)
		}
	}
	cfg := &core.Config{Observer: settles.Observe}
	var g *core.Guard
	if store == "redis" {
		g = testenv.RedisGuard(b, cfg)
	} else {
		s, err := pgstore.New(ctx, pool, &pgstore.Config{Migrate: true})
		require.NoError(b, err)
		g = testenv.NewGuard(b, s, cfg)
	}
	params := make([]river.InsertManyParams, 0, 2*b.N)
	for i := range b.N {
		for c := range 2 {
			args := settleArgs{N: i}
			if !pairs {
				args.C = strconv.Itoa(c)
			}
			params = append(params, river.InsertManyParams{Args: args})
		}
	}
	_, err := insertClient(b, pool, schema).InsertMany(ctx, params)
	require.NoError(b, err)
	workers := river.NewWorkers()
	river.AddWorker(workers, settleWorker{})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger:     quietLogger(),
		Queues:     map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 16}},
		Schema:     schema,
		Workers:    workers,
		Middleware: []rivertype.Middleware{MustMiddleware(g, nil)},
	})
	require.NoError(b, err)
	b.StartTimer()
	start := time.Now()
	require.NoError(b, client.Start(ctx))
	if pairs {
		settles.Wait(b, b.N, 5*time.Minute)
	} else {
		select {
		case <-allRan:
		case <-time.After(5 * time.Minute):
			b.Fatal("jobs did not finish")
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(2*b.N)/elapsed.Seconds(), "jobs/s")
	if pairs {
		settles.Report(b)
	}
	stop, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(b, client.Stop(stop))
}
