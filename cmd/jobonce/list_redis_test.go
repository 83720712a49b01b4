package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// TestListScansEveryPrimaryOfACluster: on a Cluster client, list scans each
// primary and finds the claims and markers of every slot, each once.
func TestListScansEveryPrimaryOfACluster(t *testing.T) {
	cluster := testenv.StartRedisCluster(t, 3, 1)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
	t.Cleanup(func() { _ = client.Close() })
	store, err := redisstore.New(client, &redisstore.Config{SkipEvictionCheck: true})
	require.NoError(t, err)
	ctx := context.Background()
	const prefix, claims, markers = "jobonce:", 60, 30
	want := map[string]driver.State{}
	for i := range claims + markers {
		key, token := prefix+"job-"+strconv.Itoa(i), driver.NewToken()
		_, err := store.Claim(ctx, driver.ClaimRequest{Key: key, Token: token, Lease: time.Minute})
		require.NoError(t, err)
		want[key] = driver.StateRunning
		if i >= claims {
			require.NoError(t, store.Complete(ctx, driver.CompleteRequest{Key: key, Token: token, Retention: time.Hour}))
			want[key] = driver.StateDone
		}
	}
	require.NoError(t, client.Set(ctx, "elsewhere:job-1", "hello", time.Minute).Err())

	l, err := listRedis(ctx, client, listOptions{prefix: prefix, lease: time.Minute, scan: 1000, done: true})
	require.NoError(t, err)
	got := map[string]driver.State{}
	for _, e := range append(l.claims, l.done...) {
		_, seen := got[e.key]
		require.False(t, seen, "%q listed twice", e.key)
		got[e.key] = e.state
	}
	require.Equal(t, want, got)
	require.Equal(t, markers, l.doneCount)
	require.False(t, l.partial)
	require.Contains(t, l.notes, "Scanned the 3 primaries of the Cluster.")
}

func TestTheScanPatternMatchesThePrefixAsItIs(t *testing.T) {
	require.Equal(t, `a\*b\?c\[d\]e\\f:`, globEscape(`a*b?c[d]e\f:`))
	require.Equal(t, "jobonce:", globEscape("jobonce:"))
}
