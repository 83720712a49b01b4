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
	"github.com/redis/go-redis/v9"

	asynqonce "github.com/jobonce/jobonce/adapters/asynq"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/testenv"
)

// benchChunk is how many tasks a variant works in one turn of a round.
const benchChunk = 1000

// serverVariant is one way of working no-op tasks for BenchmarkServer, with
// what it cost over the run.
type serverVariant struct {
	name   string
	queue  string
	h      asynq.Handler
	delays *testenv.MarkerDelays // the crash window, of the guarded variants

	left  atomic.Int64  // tasks of the current turn not yet worked
	first atomic.Int64  // when the turn's first task began (UnixNano)
	done  chan struct{} // closed when left reaches 0

	spent, cpu, rcpu time.Duration
	tasks            int
}

// BenchmarkServer measures no-op tasks per second through an Asynq server
// with concurrency 16, plain and with the middleware (with its defaults,
// without group commit, and the naive two-command middleware for reference),
// on a Redis server of the benchmark's own. The variants take turns in
// rounds, in an order that rotates each round: in each turn 1000 distinct
// tasks are enqueued, then a server drains them, timed from its first task
// to its last, so every variant sees the same machine load and every ratio
// comes from one run. It reports each variant's tasks/s, the CPU time of this process (server and
// middleware) and of Redis per task (-cpu-µs/task, -redis-cpu-µs/task: on a
// busy machine their sum, the cost of a task, is a steadier measure than a
// rate), the ratios jobonce/plain, ungrouped/plain, naive/plain and
// jobonce/naive, and for the middleware the crash window: how long after the
// handler returned its task's done marker was written (-marker-p50-µs,
// -marker-p99-µs; see testenv.MarkerDelays). Run:
//
//	go test -run '^$' -bench BenchmarkServer -benchtime 4000x -count 3 ./adapters/asynq
func BenchmarkServer(b *testing.B) {
	redisSrv := testenv.StartRedisServer(b)
	rdb := redisSrv.Client()
	opt := asynq.RedisClientOpt{Addr: redisSrv.Addr}
	client := asynq.NewClient(opt)
	b.Cleanup(func() { _ = client.Close() })

	var variants []*serverVariant
	for _, name := range []string{"plain", "jobonce", "ungrouped", "naive"} {
		v := &serverVariant{name: name, queue: "bench-" + name}
		var h asynq.Handler = asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
			v.first.CompareAndSwap(0, time.Now().UnixNano())
			if v.left.Add(-1) == 0 {
				close(v.done)
			}
			return nil
		})
		switch name {
		case "jobonce", "ungrouped":
			v.delays = new(testenv.MarkerDelays)
			cfg := &core.Config{DisableGroupCommit: name == "ungrouped", Observer: v.delays.Observe}
			inner := asynq.HandlerFunc(testenv.RecordReturns(v.delays, asynqonce.DefaultKey, h.ProcessTask))
			h = asynqonce.MustMiddleware(testenv.RedisGuardOn(b, rdb, name+":", cfg), nil)(inner)
		case "naive":
			h = naive(rdb, "naive:", h)
		}
		v.h = h
		variants = append(variants, v)
	}
	var seq atomic.Int64
	b.ResetTimer()
	for done, round := 0, 0; done < b.N; done, round = done+benchChunk, round+1 {
		n := min(benchChunk, b.N-done)
		for j := range variants {
			v := variants[(j+round)%len(variants)]
			b.StopTimer()
			for range n {
				task := asynq.NewTask("noop", strconv.AppendInt(nil, seq.Add(1), 10))
				if _, err := client.Enqueue(task, asynq.Queue(v.queue)); err != nil {
					b.Fatal(err)
				}
			}
			v.left.Store(int64(n))
			v.first.Store(0)
			v.done = make(chan struct{})
			srv := asynq.NewServer(opt, asynq.Config{
				Concurrency: 16, Queues: map[string]int{v.queue: 1}, LogLevel: asynq.ErrorLevel,
				IsFailure: asynqonce.IsFailure, RetryDelayFunc: asynqonce.RetryDelay,
			})
			b.StartTimer()
			cpu, rcpu := testenv.ProcessCPU(), testenv.RedisCPU(b, rdb)
			if err := srv.Start(v.h); err != nil {
				b.Fatal(err)
			}
			select {
			case <-v.done:
			case <-time.After(5 * time.Minute):
				b.Fatalf("%s: tasks did not finish", v.name)
			}
			v.spent += time.Since(time.Unix(0, v.first.Load())) // from the first task, not the server's start
			v.cpu += testenv.ProcessCPU() - cpu
			v.rcpu += testenv.RedisCPU(b, rdb) - rcpu
			v.tasks += n
			b.StopTimer()
			srv.Shutdown()
			b.StartTimer()
		}
	}
	rate := make(map[string]float64)
	for _, v := range variants {
		rate[v.name] = float64(v.tasks) / v.spent.Seconds()
		b.ReportMetric(rate[v.name], v.name+"-tasks/s")
		b.ReportMetric(float64(v.cpu.Microseconds())/float64(v.tasks), v.name+"-cpu-µs/task")
		b.ReportMetric(float64(v.rcpu.Microseconds())/float64(v.tasks), v.name+"-redis-cpu-µs/task")
		if v.delays != nil {
			v.delays.Report(b, v.name+"-")
		}
	}
	for _, name := range []string{"jobonce", "ungrouped", "naive"} {
		b.ReportMetric(rate[name]/rate["plain"], name+"/plain")
	}
	b.ReportMetric(rate["jobonce"]/rate["naive"], "jobonce/naive")
}

// naive is the reference two-command middleware: SET NX PX to claim, SET of
// a done marker after the handler (no token check, no heartbeat, no
// release), on rdb under prefix.
func naive(rdb *redis.Client, prefix string, next asynq.Handler) asynq.Handler {
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
// goroutines (c16), where claims and done markers share round trips. The
// variants take turns in chunks of 500 tasks, in an order that rotates each
// round, so every ratio comes from one run; it reports each one's time and
// this process's CPU per task, and jobonce/naive (above 1, jobonce is
// faster). Run:
//
//	go test -run '^$' -bench BenchmarkHandler -benchtime 4000x -count 3 ./adapters/asynq
func BenchmarkHandler(b *testing.B) {
	rdb := testenv.StartRedisServer(b).Client()
	noop := asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })
	names := []string{"naive", "ungrouped", "jobonce"}
	handlers := map[string]asynq.Handler{
		"naive":     naive(rdb, "naive:", noop),
		"ungrouped": asynqonce.MustMiddleware(testenv.RedisGuardOn(b, rdb, "ungrouped:", &core.Config{DisableGroupCommit: true}), nil)(noop),
		"jobonce":   asynqonce.MustMiddleware(testenv.RedisGuardOn(b, rdb, "jobonce:", nil), nil)(noop),
	}
	var seq atomic.Int64
	for _, c := range []int{1, 16} {
		b.Run(fmt.Sprintf("c%d", c), func(b *testing.B) {
			const chunk = 500
			spent, cpu := map[string]time.Duration{}, map[string]time.Duration{}
			for done, round := 0, 0; done < b.N; done, round = done+chunk, round+1 {
				n := int64(min(chunk, b.N-done))
				for j := range names {
					name := names[(j+round)%len(names)]
					h := handlers[name]
					var next atomic.Int64
					start, own := time.Now(), testenv.ProcessCPU()
					var wg sync.WaitGroup
					for range c {
						wg.Go(func() {
							for next.Add(1) <= n {
								task := asynq.NewTask("noop", strconv.AppendInt(nil, seq.Add(1), 10))
								if err := h.ProcessTask(context.Background(), task); err != nil {
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
				b.ReportMetric(float64(spent[name].Nanoseconds())/float64(b.N), name+"-ns/task")
				b.ReportMetric(float64(cpu[name].Microseconds())/float64(b.N), name+"-cpu-µs/task")
			}
			b.ReportMetric(spent["naive"].Seconds()/spent["jobonce"].Seconds(), "jobonce/naive")
		})
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
