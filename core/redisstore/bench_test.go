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
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/internal/testenv"
)

// rawRelease is the usual token-checked delete that a hand-written
// SET NX PX lock pairs with.
var rawRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

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

// BenchmarkClaimCompleteInterleaved compares Guard.Do (claim + complete) with
// the raw pair it replaces: SET NX PX, then a token-checked Lua DEL. They run
// in alternating chunks of 500 operations at 1 and 64 goroutines, so that
// both see the same machine load; it reports each one's time and Redis
// server CPU per operation, and jobonce's throughput as a fraction of the
// raw pair's (jobonce/raw above 1 is faster). Allocations per operation of
// each, next to redislock and redsync, come from the bench module. Run:
//
//	go test -run '^$' -bench ClaimCompleteInterleaved -benchtime 30000x -count 3 ./core/redisstore
func BenchmarkClaimCompleteInterleaved(b *testing.B) {
	prefix := testenv.Prefix(b)
	client := testenv.Redis(b, prefix)
	g, err := core.New(newStore(b, client), &core.Config{KeyPrefix: prefix, Logger: quiet, Retention: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	var seq atomic.Int64
	raw := func(ctx context.Context) error {
		key := prefix + "r" + strconv.FormatInt(seq.Add(1), 36)
		tok := driver.NewToken().String()
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
			var spent, server [2]time.Duration
			ops := [2]func(context.Context) error{raw, guarded}
			for done := 0; done < b.N; done += chunk {
				n := min(chunk, b.N-done)
				for i, op := range ops {
					cpu := redisCPU(b, client)
					spent[i] += runChunk(b, op, n, c)
					server[i] += redisCPU(b, client) - cpu
				}
			}
			perOp := func(d time.Duration, unit time.Duration) float64 { return float64(d) / float64(unit) / float64(b.N) }
			b.ReportMetric(perOp(spent[0], time.Nanosecond), "raw-ns/op")
			b.ReportMetric(perOp(spent[1], time.Nanosecond), "jobonce-ns/op")
			b.ReportMetric(perOp(server[0], time.Microsecond), "raw-redis-µs/op")
			b.ReportMetric(perOp(server[1], time.Microsecond), "jobonce-redis-µs/op")
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
