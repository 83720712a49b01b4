package redisstore_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/testenv"
)

// rawRelease is the usual token-checked delete that a hand-written
// SET NX PX lock pairs with.
var rawRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// BenchmarkClaimComplete compares Guard.Do (claim + complete, two round
// trips) with the raw pair it replaces: SET NX PX, then a token-checked Lua
// DEL. Run side by side at 1 and 64 goroutines:
//
//	go test -run '^$' -bench ClaimComplete -count 6 ./core/redisstore | benchstat -col /impl -
func BenchmarkClaimComplete(b *testing.B) {
	prefix := testenv.Prefix(b)
	client := testenv.Redis(b, prefix)
	client.Options().PoolSize = 128
	g, err := core.New(newStore(b, client), &core.Config{KeyPrefix: prefix, Logger: quiet, Retention: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	var seq atomic.Int64
	impls := []struct {
		name string
		op   func(ctx context.Context, key string) error
	}{
		{"raw", func(ctx context.Context, key string) error {
			tok := core.NewToken().String()
			if err := client.SetNX(ctx, prefix+key, tok, 30*time.Second).Err(); err != nil {
				return err
			}
			return rawRelease.Run(ctx, client, []string{prefix + key}, tok).Err()
		}},
		{"jobonce", func(ctx context.Context, key string) error {
			_, err := g.Do(ctx, key, func(context.Context) error { return nil })
			return err
		}},
	}
	for _, c := range []int{1, 64} {
		for _, impl := range impls {
			b.Run("c="+strconv.Itoa(c)+"/impl="+impl.name, func(b *testing.B) {
				ctx := context.Background()
				b.ReportAllocs()
				cpu := redisCPU(b, client)
				defer func() { b.ReportMetric(float64((redisCPU(b, client)-cpu).Microseconds())/float64(b.N), "redis-µs/op") }()
				b.SetParallelism(max(1, c/2)) // 2 cores here: GOMAXPROCS × c/2 goroutines
				if c == 1 {
					for b.Loop() {
						if err := impl.op(ctx, "k"+strconv.FormatInt(seq.Add(1), 36)); err != nil {
							b.Fatal(err)
						}
					}
					return
				}
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := impl.op(ctx, "k"+strconv.FormatInt(seq.Add(1), 36)); err != nil {
							b.Fatal(err)
						}
					}
				})
			})
		}
	}
}

// redisCPU returns the CPU time the Redis server has used (INFO cpu).
func redisCPU(b *testing.B, client *redis.Client) time.Duration {
	info, err := client.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for line := range strings.SplitSeq(info, "\r\n") {
		for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, f); ok {
				x, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatal(err)
				}
				total += x
			}
		}
	}
	return time.Duration(total * float64(time.Second))
}

// BenchmarkClaimCompleteInterleaved runs the raw pair and Guard.Do in
// alternating chunks of 500 operations, so that both see the same machine
// load, and reports each one's time per operation and jobonce's throughput
// as a fraction of the raw pair's (jobonce/raw above 1 is faster). Run it
// with a fixed count, e.g. -benchtime=20000x.
func BenchmarkClaimCompleteInterleaved(b *testing.B) {
	prefix := testenv.Prefix(b)
	client := testenv.Redis(b, prefix)
	client.Options().PoolSize = 128
	g, err := core.New(newStore(b, client), &core.Config{KeyPrefix: prefix, Logger: quiet, Retention: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	var seq atomic.Int64
	raw := func(ctx context.Context) error {
		key := prefix + "r" + strconv.FormatInt(seq.Add(1), 36)
		tok := core.NewToken().String()
		if err := client.SetNX(ctx, key, tok, 30*time.Second).Err(); err != nil {
			return err
		}
		return rawRelease.Run(ctx, client, []string{key}, tok).Err()
	}
	guarded := func(ctx context.Context) error {
		_, err := g.Do(ctx, "j"+strconv.FormatInt(seq.Add(1), 36), func(context.Context) error { return nil })
		return err
	}
	for _, c := range []int{1, 64} {
		b.Run("c="+strconv.Itoa(c), func(b *testing.B) {
			const chunk = 500
			var spent [2]time.Duration
			ops := [2]func(context.Context) error{raw, guarded}
			for done := 0; done < b.N; done += chunk {
				n := min(chunk, b.N-done)
				for i, op := range ops {
					spent[i] += runChunk(b, op, n, c)
				}
			}
			b.ReportMetric(float64(spent[0].Nanoseconds())/float64(b.N), "raw-ns/op")
			b.ReportMetric(float64(spent[1].Nanoseconds())/float64(b.N), "jobonce-ns/op")
			b.ReportMetric(spent[0].Seconds()/spent[1].Seconds(), "jobonce/raw")
		})
	}
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
