package redisstore_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// rawRelease is the usual token-checked delete that a hand-written
// SET NX PX lock pairs with.
var rawRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// BenchmarkClaimCompleteInterleaved compares Guard.Do (claim + complete)
// with what it replaces: the raw pair (SET NX PX, then a token-checked Lua
// DEL), the naive pair a user would write (SET NX PX, then SET a done
// marker), and Guard.Do without the group commit. The four run in
// alternating chunks of 500 operations at 1, 4, 16, 64 and 256 goroutines,
// so that all see the same machine load; it reports each one's time and
// Redis server CPU per operation, and the rates as fractions (jobonce/naive
// above 1 means Guard.Do is faster than the naive pair). Allocations per
// operation, next to redislock and redsync, come from the bench module.
// Run:
//
//	go test -run '^$' -bench ClaimCompleteInterleaved -benchtime 30000x -count 3 ./core/redisstore
func BenchmarkClaimCompleteInterleaved(b *testing.B) {
	prefix := testenv.Prefix(b)
	client := testenv.Redis(b, prefix)
	guard := func(ungrouped bool) *core.Guard {
		g, err := core.New(newStore(b, client), &core.Config{KeyPrefix: prefix, Logger: quiet, Retention: time.Minute, DisableGroupCommit: ungrouped})
		if err != nil {
			b.Fatal(err)
		}
		return g
	}
	var seq atomic.Int64
	next := func(kind string) string { return prefix + kind + strconv.FormatInt(seq.Add(1), 36) }
	raw := func(ctx context.Context) error {
		key, tok := next("r"), driver.NewToken().String()
		if err := client.SetNX(ctx, key, tok, 30*time.Second).Err(); err != nil {
			return err
		}
		return rawRelease.Run(ctx, client, []string{key}, tok).Err()
	}
	naive := func(ctx context.Context) error {
		key := next("n")
		if ok, err := client.SetNX(ctx, key, "running", 30*time.Second).Result(); err != nil || !ok {
			return err
		}
		return client.Set(ctx, key, "done", time.Minute).Err()
	}
	do := func(g *core.Guard, kind string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := g.Do(ctx, next(kind), func(context.Context) error { return nil })
			return err
		}
	}
	names := [...]string{"raw", "naive", "jobonce", "ungrouped"}
	ops := [...]func(context.Context) error{raw, naive, do(guard(false), "j"), do(guard(true), "u")}
	for _, c := range []int{1, 4, 16, 64, 256} {
		b.Run("c="+strconv.Itoa(c), func(b *testing.B) {
			const chunk = 500
			var spent, server, own [len(ops)]time.Duration
			for done := 0; done < b.N; done += chunk {
				n := min(chunk, b.N-done)
				for i, op := range ops {
					cpu, mine := testenv.RedisCPU(b, client), processCPU(b)
					spent[i] += runChunk(b, op, n, c)
					server[i] += testenv.RedisCPU(b, client) - cpu
					own[i] += processCPU(b) - mine
				}
			}
			perOp := func(d time.Duration, unit time.Duration) float64 { return float64(d) / float64(unit) / float64(b.N) }
			for i, name := range names {
				b.ReportMetric(perOp(spent[i], time.Nanosecond), name+"-ns/op")
				b.ReportMetric(perOp(server[i], time.Microsecond), name+"-redis-µs/op")
				b.ReportMetric(perOp(own[i], time.Microsecond), name+"-client-µs/op")
			}
			b.ReportMetric(spent[1].Seconds()/spent[2].Seconds(), "jobonce/naive")
			b.ReportMetric(spent[0].Seconds()/spent[2].Seconds(), "jobonce/raw")
			b.ReportMetric(spent[0].Seconds()/spent[1].Seconds(), "naive/raw")
			b.ReportMetric(spent[0].Seconds()/spent[3].Seconds(), "ungrouped/raw")
			b.ReportMetric(spent[3].Seconds()/spent[2].Seconds(), "jobonce/ungrouped")
		})
	}
}

// BenchmarkDo measures one Guard.Do of a no-op job on Redis, one goroutine:
// its allocations per operation are the figure docs/performance.md gives.
func BenchmarkDo(b *testing.B) {
	prefix := testenv.Prefix(b)
	g, err := core.New(newStore(b, testenv.Redis(b, prefix)), &core.Config{KeyPrefix: prefix, Logger: quiet, Retention: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	nop := func(context.Context) error { return nil }
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		if _, err := g.Do(ctx, "d"+strconv.Itoa(i), nop); err != nil {
			b.Fatal(err)
		}
	}
}

// processCPU returns the CPU time this process has used, user and system.
func processCPU(b *testing.B) time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		b.Fatal(err)
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// runChunk runs op n times on c goroutines and returns the wall time.
func runChunk(b *testing.B, op func(context.Context) error, n, c int) time.Duration {
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range c {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if err := op(context.Background()); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// BenchmarkWaitReplicas compares Guard.Do (claim + complete) on a primary
// with one replica, without and with Config.WaitReplicas 1 (each claim and
// done marker waits for the replica's acknowledgement, in the same round
// trip), in alternating chunks at 1 and 64 goroutines; it reports each
// one's time per operation and the acknowledged one's throughput as a
// fraction of the other's. Run:
//
//	go test -run '^$' -bench WaitReplicas -benchtime 20000x -count 3 ./core/redisstore
func BenchmarkWaitReplicas(b *testing.B) {
	primary, _ := testenv.StartRedisReplicas(b, 1)
	client := primary.Client()
	guard := func(w int) *core.Guard {
		s, err := redisstore.New(client, &redisstore.Config{Logger: quiet, WaitReplicas: w})
		if err != nil {
			b.Fatal(err)
		}
		g, err := core.New(s, &core.Config{Logger: quiet, Retention: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		return g
	}
	var seq atomic.Int64
	op := func(g *core.Guard) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := g.Do(ctx, "w"+strconv.FormatInt(seq.Add(1), 36), func(context.Context) error { return nil })
			return err
		}
	}
	ops := [2]func(context.Context) error{op(guard(0)), op(guard(1))}
	for _, c := range []int{1, 64} {
		b.Run("c="+strconv.Itoa(c), func(b *testing.B) {
			const chunk = 500
			var spent [2]time.Duration
			for done := 0; done < b.N; done += chunk {
				n := min(chunk, b.N-done)
				for i, op := range ops {
					spent[i] += runChunk(b, op, n, c)
				}
			}
			b.ReportMetric(float64(spent[0].Nanoseconds())/float64(b.N), "async-ns/op")
			b.ReportMetric(float64(spent[1].Nanoseconds())/float64(b.N), "acked-ns/op")
			b.ReportMetric(spent[0].Seconds()/spent[1].Seconds(), "acked/async")
		})
	}
}
