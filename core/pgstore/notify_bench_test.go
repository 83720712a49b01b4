package pgstore_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/internal/pgtest"
	"github.com/jobonce/jobonce/internal/testenv"
)

// BenchmarkCompleteAwaited measures what notifying costs a done marker:
// b.N claims are made (and, for awaited=yes, marked awaited by another
// token's Await, so each complete calls pg_notify) before the clock starts,
// then 16 callers complete them. A commit that notifies takes a lock that
// serialises such commits; awaited=no is the ordinary path, which notifies
// nothing. A Listener of the store's channel is open in both.
func BenchmarkCompleteAwaited(b *testing.B) {
	ctx := context.Background()
	small, schema := pgtest.Postgres(b)
	migratedStore(b, small, nil)
	pool := pgtest.PostgresOn(b, schema, 20)
	warm(b, pool, 17)
	s := migratedStore(b, pool, nil)
	l, err := s.Listen(ctx, func(string) {})
	require.NoError(b, err)
	b.Cleanup(func() { _ = l.Close() })
	prefix := testenv.Prefix(b)
	for _, awaited := range []bool{false, true} {
		name := "awaited=no"
		if awaited {
			name = "awaited=yes"
		}
		b.Run(name, func(b *testing.B) {
			reqs := make([]driver.CompleteRequest, b.N)
			run := testenv.RandomID(4)
			for i := range reqs {
				key := prefix + name + ":" + run + ":" + strconv.Itoa(i)
				tok := driver.NewToken()
				r, err := s.Claim(ctx, driver.ClaimRequest{Key: key, Token: tok, Lease: time.Minute})
				require.NoError(b, err)
				require.Equal(b, driver.StateClaimed, r.State)
				if awaited {
					r, err := s.Await(ctx, driver.ClaimRequest{Key: key, Token: driver.NewToken(), Lease: time.Minute})
					require.NoError(b, err)
					require.Equal(b, driver.StateRunning, r.State)
				}
				reqs[i] = driver.CompleteRequest{Key: key, Token: tok, Retention: time.Minute, Fence: r.Fence}
			}
			var next sync.Mutex
			i := 0
			b.ResetTimer()
			var wg sync.WaitGroup
			for range 16 {
				wg.Go(func() {
					for {
						next.Lock()
						j := i
						i++
						next.Unlock()
						if j >= len(reqs) {
							return
						}
						if err := s.Complete(ctx, reqs[j]); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "completes/s")
		})
	}
}
