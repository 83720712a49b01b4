package bench

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

var rawRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// BenchmarkClaimComplete runs one guarded no-op per op: jobonce's claim and
// complete, the raw SET NX PX + token-checked DEL pair, the naive SET NX PX
// + SET of a done marker, bsm/redislock's Obtain + Release, and redsync's
// Lock + Unlock, each on a fresh key, at 1, 16 and 64 goroutines.
func BenchmarkClaimComplete(b *testing.B) {
	prefix := testenv.Prefix(b)
	client := testenv.Redis(b, prefix)
	store, err := redisstore.New(client, nil)
	if err != nil {
		b.Fatal(err)
	}
	g, err := core.New(store, &core.Config{KeyPrefix: prefix, Retention: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	locker := redislock.New(client)
	rs := redsync.New(goredis.NewPool(client))
	var seq atomic.Int64
	impls := []struct {
		name string
		op   func(ctx context.Context, key string) error
	}{
		{"raw", func(ctx context.Context, key string) error {
			tok := driver.NewToken().String()
			if err := client.SetNX(ctx, prefix+key, tok, 30*time.Second).Err(); err != nil {
				return err
			}
			return rawRelease.Run(ctx, client, []string{prefix + key}, tok).Err()
		}},
		{"naive", func(ctx context.Context, key string) error {
			if err := client.SetNX(ctx, prefix+key, "running", 30*time.Second).Err(); err != nil {
				return err
			}
			return client.Set(ctx, prefix+key, "done", time.Minute).Err()
		}},
		{"jobonce", func(ctx context.Context, key string) error {
			_, err := g.Do(ctx, key, func(context.Context) error { return nil })
			return err
		}},
		{"redislock", func(ctx context.Context, key string) error {
			lock, err := locker.Obtain(ctx, prefix+key, 30*time.Second, nil)
			if err != nil {
				return err
			}
			return lock.Release(ctx)
		}},
		{"redsync", func(ctx context.Context, key string) error {
			m := rs.NewMutex(prefix+key, redsync.WithExpiry(30*time.Second))
			if err := m.LockContext(ctx); err != nil {
				return err
			}
			_, err := m.UnlockContext(ctx)
			return err
		}},
	}
	for _, c := range []int{1, 16, 64} {
		for _, impl := range impls {
			b.Run("c="+strconv.Itoa(c)+"/impl="+impl.name, func(b *testing.B) {
				ctx := context.Background()
				b.ReportAllocs()
				next := func() string { return "k" + strconv.FormatInt(seq.Add(1), 36) }
				if c == 1 {
					for b.Loop() {
						if err := impl.op(ctx, next()); err != nil {
							b.Fatal(err)
						}
					}
					return
				}
				b.SetParallelism(max(c/runtime.GOMAXPROCS(0), 1)) // c goroutines
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := impl.op(ctx, next()); err != nil {
							b.Fatal(err)
						}
					}
				})
			})
		}
	}
}
