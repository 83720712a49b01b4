package pgstore_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/pgtest"
	"github.com/jobonce/jobonce/internal/testenv"
)

// BenchmarkClaimComplete measures Guard.Do (claim, then complete) with a
// no-op job on a fresh key per operation, on PostgreSQL and on Redis side by
// side, with 1 and 16 concurrent callers. store=postgres-async gives the
// Store a pool of its own with synchronous_commit off (see the package doc).
func BenchmarkClaimComplete(b *testing.B) {
	ctx := context.Background()
	small, schema := pgtest.Postgres(b)
	migratedStore(b, small, nil)
	pgPool := pgtest.PostgresOn(b, schema, 20)
	warm(b, pgPool, 17)
	pg := migratedStore(b, pgPool, nil)
	asyncPool := pgtest.PostgresOn(b, schema, 20, "synchronous_commit", "off")
	warm(b, asyncPool, 17)
	pgAsync := migratedStore(b, asyncPool, nil)

	prefix := testenv.Prefix(b)
	rs, err := redisstore.New(testenv.Redis(b, prefix), &redisstore.Config{SkipEvictionCheck: true})
	require.NoError(b, err)

	stores := []struct {
		name  string
		store driver.Store
	}{{"store=postgres", pg}, {"store=postgres-async", pgAsync}, {"store=redis", rs}}
	for _, conc := range []int{1, 16} {
		for _, st := range stores {
			g, err := core.New(st.store, &core.Config{
				KeyPrefix: prefix + st.name + ":" + strconv.Itoa(conc) + ":",
				Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
			})
			require.NoError(b, err)
			var seq atomic.Int64 // across the runs of one sub-benchmark: every key is fresh
			b.Run(fmt.Sprintf("%s/c=%d", st.name, conc), func(b *testing.B) {
				nop := func(context.Context) error { return nil }
				do := func() {
					key := strconv.FormatInt(seq.Add(1), 36)
					if out, err := g.Do(ctx, key, nop); err != nil || out != core.Ran {
						b.Errorf("Do: %s, %v", out, err)
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				if conc == 1 {
					for b.Loop() {
						do()
					}
				} else {
					b.SetParallelism((conc + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							do()
						}
					})
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
			})
		}
	}
}

// BenchmarkTxEffect measures what TxGuard.Do adds to a transaction: a bare effect
// transaction (INSERT one row, commit) next to the same effect through TxGuard.Do
// (record the key, INSERT, commit), with 1 and 16 concurrent callers. The
// commit=async variants turn synchronous_commit off, which takes the disk
// flush out of both and leaves the record's own cost in view.
func BenchmarkTxEffect(b *testing.B) {
	ctx := context.Background()
	small, schema := pgtest.Postgres(b)
	migratedStore(b, small, nil)
	effects(b, small)
	var seq atomic.Int64
	for _, commit := range []string{"sync", "async"} {
		pool := pgtest.PostgresOn(b, schema, 20)
		if commit == "async" {
			pool = pgtest.PostgresOn(b, schema, 20, "synchronous_commit", "off")
		}
		warm(b, pool, 17)
		mode := txOf(b, migratedStore(b, pool, nil))
		variants := []struct {
			name string
			run  func(key string) error
		}{
			{"bare", func(key string) error {
				return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return insertEffect(key)(ctx, tx) })
			}},
			{"dotx", func(key string) error {
				out, err := mode.Do(ctx, key, insertEffect(key))
				if err == nil && out != core.Ran {
					err = fmt.Errorf("outcome %s", out)
				}
				return err
			}},
		}
		for _, conc := range []int{1, 16} {
			for _, v := range variants {
				b.Run(fmt.Sprintf("commit=%s/%s/c=%d", commit, v.name, conc), func(b *testing.B) {
					run := func() {
						if err := v.run("k" + strconv.FormatInt(seq.Add(1), 36)); err != nil {
							b.Error(err)
						}
					}
					b.ReportAllocs()
					b.ResetTimer()
					if conc == 1 {
						for b.Loop() {
							run()
						}
					} else {
						b.SetParallelism((conc + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
						b.RunParallel(func(pb *testing.PB) {
							for pb.Next() {
								run()
							}
						})
					}
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
				})
			}
		}
	}
}

// warm opens n connections in pool before the timer starts.
func warm(b *testing.B, pool *pgxpool.Pool, n int) {
	b.Helper()
	conns := make([]*pgxpool.Conn, n)
	for i := range conns {
		c, err := pool.Acquire(context.Background())
		require.NoError(b, err)
		conns[i] = c
	}
	for _, c := range conns {
		c.Release()
	}
}
