package riveronce

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
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

// noOpVariant is one way of working no-op jobs for BenchmarkNoOpJobs, with
// what it cost over the run.
type noOpVariant struct {
	name   string
	pool   *pgxpool.Pool
	schema string
	mw     []rivertype.Middleware
	delays *testenv.MarkerDelays // the crash window, of the guarded variants

	spent, cpu, rcpu time.Duration
	jobs             int
}

// BenchmarkNoOpJobs works no-op jobs through River clients on PostgreSQL,
// side by side: plain; with the middleware on Redis (group commit on, the default);
// with group commit off; and with a naive two-command middleware for reference,
// each on a schema of its own, the middleware on a Redis server of the
// benchmark's own. The variants take turns in rounds, in an order that
// rotates each round: in each turn 2000 jobs are inserted, then a new client
// works them, timed from its start to the last job's completion, so every
// variant sees the same machine load and every ratio comes from one run.
// Settings: FetchCooldown 1ms, FetchPollInterval 50ms, MaxWorkers 100. It
// reports each variant's jobs/s, the CPU time this process and Redis used
// per job, the ratios middleware/plain, middleware-ungrouped/plain,
// naive/plain and middleware/naive, and for the middleware the crash window:
// how long after the worker returned its job's done marker was written
// (-marker-p50-µs, -marker-p99-µs; see testenv.MarkerDelays). Run:
//
//	go test -run '^$' -bench NoOpJobs -benchtime 8000x -count 3 ./adapters/river
func BenchmarkNoOpJobs(b *testing.B) {
	rdb := testenv.StartRedisServer(b).Client()
	var variants []*noOpVariant
	for _, name := range []string{"plain", "middleware", "middleware-ungrouped", "naive"} {
		v := &noOpVariant{name: name}
		v.pool, v.schema = riverSchema(b)
		switch name {
		case "middleware", "middleware-ungrouped":
			v.delays = new(testenv.MarkerDelays)
			g := testenv.RedisGuardOn(b, rdb, name+":", &core.Config{DisableGroupCommit: name == "middleware-ungrouped", Observer: v.delays.Observe})
			v.mw = []rivertype.Middleware{MustMiddleware(g, nil)}
		case "naive":
			v.mw = []rivertype.Middleware{&naiveMiddleware{rdb: rdb, prefix: "naive:"}}
		}
		variants = append(variants, v)
	}
	const chunk = 2000
	for done, round := 0, 0; done < b.N; done, round = done+chunk, round+1 {
		n := min(chunk, b.N-done)
		for j := range variants {
			variants[(j+round)%len(variants)].turn(b, rdb, done, n)
		}
	}
	rate := make(map[string]float64)
	for _, v := range variants {
		rate[v.name] = float64(v.jobs) / v.spent.Seconds()
		b.ReportMetric(rate[v.name], v.name+"-jobs/s")
		b.ReportMetric(float64(v.cpu.Microseconds())/float64(v.jobs), v.name+"-cpu-µs/job")
		b.ReportMetric(float64(v.rcpu.Microseconds())/float64(v.jobs), v.name+"-redis-cpu-µs/job")
		if v.delays != nil {
			v.delays.Report(b, v.name+"-")
		}
	}
	for _, name := range []string{"middleware", "middleware-ungrouped", "naive"} {
		b.ReportMetric(rate[name]/rate["plain"], name+"/plain")
	}
	b.ReportMetric(rate["middleware"]/rate["naive"], "middleware/naive")
}

// turn inserts n no-op jobs numbered from first, outside the timer, and
// works them with a new client, counting what that cost.
func (v *noOpVariant) turn(b *testing.B, rdb *redis.Client, first, n int) {
	b.StopTimer()
	ctx := context.Background()
	params := make([]river.InsertManyParams, 0, n)
	for i := first; i < first+n; i++ {
		params = append(params, river.InsertManyParams{Args: noopArgs{N: i}})
	}
	_, err := insertClient(b, v.pool, v.schema).InsertManyFast(ctx, params)
	require.NoError(b, err)
	workers := river.NewWorkers()
	var worker river.Worker[noopArgs] = noopWorker{}
	if v.delays != nil {
		worker = river.WorkFunc(testenv.RecordReturns(v.delays, noopKey, worker.Work))
	}
	river.AddWorker(workers, worker)
	cfg := clientConfig(v.schema, workers, 100)
	cfg.FetchCooldown = time.Millisecond
	cfg.Middleware = v.mw
	client, err := river.NewClient(riverDriver(v.pool), cfg)
	require.NoError(b, err)
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: n + 1000, Kinds: []river.EventKind{river.EventKindJobCompleted},
	})
	defer cancel()
	b.StartTimer()
	start, cpu, rcpu := time.Now(), testenv.ProcessCPU(), testenv.RedisCPU(b, rdb)
	require.NoError(b, client.Start(ctx))
	for range n {
		<-events
	}
	v.spent += time.Since(start)
	v.cpu += testenv.ProcessCPU() - cpu
	v.rcpu += testenv.RedisCPU(b, rdb) - rcpu
	v.jobs += n
	b.StopTimer()
	stop, cancelStop := context.WithTimeout(ctx, 10*time.Second)
	defer cancelStop()
	require.NoError(b, client.Stop(stop))
	b.StartTimer()
}

// noopKey is the middleware's default key of a no-op job.
func noopKey(job *river.Job[noopArgs]) string {
	return job.Kind + ":" + core.Fingerprint(job.EncodedArgs)
}

// naiveMiddleware is the reference the design measures against: two plain
// Redis commands per job, SET NX with a lease before and SET of a done
// marker after, with no heartbeat, no token check and no group commit.
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

// BenchmarkWork measures the middleware alone, without River: jobs with
// distinct args through Middleware.Work from 100 goroutines, on a Redis
// server of the benchmark's own, next to calling the job directly and to
// the naive middleware. The variants take turns in chunks of 1000 jobs, in
// an order that rotates each round, so every ratio comes from one run. It
// reports each one's time and this process's CPU per job, and
// middleware/naive (above 1, the middleware is faster). Run:
//
//	go test -run '^$' -bench BenchmarkWork -benchtime 8000x -count 3 ./adapters/river
func BenchmarkWork(b *testing.B) {
	rdb := testenv.StartRedisServer(b).Client()
	type work = func(ctx context.Context, row *rivertype.JobRow, doInner func(context.Context) error) error
	names := []string{"plain", "middleware", "middleware-ungrouped", "naive"}
	works := map[string]work{
		"plain": func(ctx context.Context, _ *rivertype.JobRow, doInner func(context.Context) error) error {
			return doInner(ctx)
		},
		"middleware":           MustMiddleware(testenv.RedisGuardOn(b, rdb, "middleware:", nil), nil).Work,
		"middleware-ungrouped": MustMiddleware(testenv.RedisGuardOn(b, rdb, "ungrouped:", &core.Config{DisableGroupCommit: true}), nil).Work,
		"naive":                (&naiveMiddleware{rdb: rdb, prefix: "naive:"}).Work,
	}
	const chunk, goroutines = 1000, 100
	var seq atomic.Int64
	spent, cpu := map[string]time.Duration{}, map[string]time.Duration{}
	for done, round := 0, 0; done < b.N; done, round = done+chunk, round+1 {
		n := int64(min(chunk, b.N-done))
		for j := range names {
			name := names[(j+round)%len(names)]
			w := works[name]
			var next atomic.Int64
			var wg sync.WaitGroup
			start, own := time.Now(), testenv.ProcessCPU()
			for range goroutines {
				wg.Go(func() {
					for next.Add(1) <= n {
						i := seq.Add(1)
						row := &rivertype.JobRow{ID: i, Kind: "riveronce_noop", EncodedArgs: strconv.AppendInt([]byte(`{"n":`), i, 10), Metadata: []byte(`{}`)}
						if err := w(context.Background(), row, func(context.Context) error { return nil }); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			spent[name] += time.Since(start)
			cpu[name] += testenv.ProcessCPU() - own
		}
	}
	for _, name := range names {
		b.ReportMetric(float64(spent[name].Nanoseconds())/float64(b.N), name+"-ns/job")
		b.ReportMetric(float64(cpu[name].Microseconds())/float64(b.N), name+"-cpu-µs/job")
	}
	b.ReportMetric(spent["naive"].Seconds()/spent["middleware"].Seconds(), "middleware/naive")
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
