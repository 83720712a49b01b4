package redisstore_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/storetest"
	"github.com/jobonce/jobonce/internal/redisops"
	"github.com/jobonce/jobonce/internal/testenv"
)

// startCluster starts three redis-server processes with cluster mode on
// loopback (no replicas), joins them with redis-cli --cluster create, and
// stops them at the end of the test.
func startCluster(t *testing.T) []string {
	t.Helper()
	return testenv.StartRedisCluster(t, 3, 0).Addrs()
}

func TestCluster(t *testing.T) {
	addrs := startCluster(t)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = client.Close() })
	require.Eventually(t, func() bool { return client.Ping(context.Background()).Err() == nil }, 10*time.Second, 50*time.Millisecond)

	t.Run("Conformance", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) driver.Store { return newStore(t, client) })
	})

	t.Run("InspectDatesAClaim", func(t *testing.T) {
		// TIME has no key: it rides in the transaction of the key's slot.
		s, ctx := newStore(t, client), context.Background()
		for _, key := range []string{testenv.Prefix(t) + "a", testenv.Prefix(t) + "b{x}", testenv.Prefix(t) + "c{y}"} {
			_, err := s.Claim(ctx, driver.ClaimRequest{Key: key, Token: driver.NewToken(), Lease: time.Minute})
			require.NoError(t, err)
			rec, err := redisops.Inspect(ctx, client, key)
			require.NoError(t, err)
			require.Positive(t, rec.Age, key)
			require.InDelta(t, time.Minute, rec.Age+rec.TTL, float64(2*time.Millisecond), key)
		}
	})

	t.Run("ManyKeysAcrossSlots", func(t *testing.T) {
		g, err := core.New(newStore(t, client), &core.Config{Logger: quiet, KeyPrefix: testenv.Prefix(t)})
		require.NoError(t, err)
		const keys, copies = 300, 4
		var runs [keys]atomic.Int32
		var wg sync.WaitGroup
		for c := range copies {
			wg.Go(func() {
				for i := range keys {
					k := (i + c*keys/copies) % keys
					for {
						_, err := g.Do(context.Background(), "k"+strconv.Itoa(k), func(context.Context) error {
							runs[k].Add(1)
							return nil
						})
						if err == nil {
							break
						}
						require.ErrorIs(t, err, core.ErrRunning)
					}
				}
			})
		}
		wg.Wait()
		for i := range keys {
			require.EqualValues(t, 1, runs[i].Load(), "key %d", i)
		}
		jobs := make([]core.Job, 10)
		for i := range jobs {
			jobs[i] = core.Job{Key: "batch-" + strconv.Itoa(i)}
		}
		claims := g.Claim(context.Background(), jobs...)
		for _, c := range claims {
			require.True(t, c.Runs())
			_, err := c.Work(context.Background(), func(context.Context) ([]byte, error) { return nil, nil })
			require.NoError(t, err)
		}
		for _, out := range g.Finish(context.Background(), claims...) {
			require.Equal(t, core.Ran, out, "a pipelined batch spanning cluster slots completes")
		}
	})
}
