package redisstore_test

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

// With WaitReplicas on a Cluster client, Batch sends each key's scripts on
// the client of the primary MasterForKey names, from the Cluster client's
// cached slot map. After a slot moves (a routine resharding), that map is
// stale until the Cluster client reloads it: a claim that meets MOVED on the
// old owner follows it to the slot's new owner at once, as the Store
// without WAIT (the Cluster client's own pipeline) does, rather than being
// answered the MOVED error (a store failure: under FailOpen, a job run
// unguarded).
func TestClusterWaitFollowsMoved(t *testing.T) {
	cluster := testenv.StartRedisCluster(t, 3, 1)
	ctx := context.Background()
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
	t.Cleanup(func() { _ = client.Close() })
	require.Eventually(t, func() bool { return client.Ping(ctx).Err() == nil }, 10*time.Second, 50*time.Millisecond)
	s, err := redisstore.New(client, &redisstore.Config{Logger: quiet, WaitReplicas: 1, WaitTimeout: time.Second})
	require.NoError(t, err)

	key := testenv.Prefix(t) + "moved"
	r, err := s.Claim(ctx, driver.ClaimRequest{Key: key, Token: driver.NewToken(), Lease: time.Minute})
	require.NoError(t, err, "the cluster acknowledges writes before the slot moves")
	require.Equal(t, driver.StateClaimed, r.State)
	require.NoError(t, client.Del(ctx, key).Err())

	// Move the key's (now empty) slot to another primary, behind the
	// Cluster client's back.
	slot, err := client.ClusterKeySlot(ctx, key).Result()
	require.NoError(t, err)
	owner, err := client.MasterForKey(ctx, key)
	require.NoError(t, err)
	var target *redis.Client
	var primaries []*redis.Client
	for _, addr := range cluster.Addrs() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = c.Close() })
		role, err := c.Do(ctx, "ROLE").Slice()
		require.NoError(t, err)
		if role[0] != "master" {
			continue
		}
		primaries = append(primaries, c)
		if addr != owner.Options().Addr && target == nil {
			target = c
		}
	}
	targetID, err := target.Do(ctx, "CLUSTER", "MYID").Text()
	require.NoError(t, err)
	require.NoError(t, target.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", targetID).Err())
	for _, c := range primaries {
		if c != target {
			require.NoError(t, c.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", targetID).Err())
		}
	}
	require.Eventually(t, func() bool {
		err := owner.Get(ctx, key).Err()
		return err != nil && redis.HasErrorPrefix(err, "MOVED")
	}, 10*time.Second, 20*time.Millisecond, "the old owner redirects the slot")
	cluster.WaitHealthy(t, 30*time.Second)

	// The Cluster client's slot map still names the old owner; the claim
	// meets MOVED there and follows it to the slot's new owner at once.
	stale, err := client.MasterForKey(ctx, key)
	require.NoError(t, err)
	require.Equal(t, owner.Options().Addr, stale.Options().Addr, "the client's slot map is stale")
	r, err = s.Claim(ctx, driver.ClaimRequest{Key: key, Token: driver.NewToken(), Lease: time.Minute})
	require.NoError(t, err, "the claim followed MOVED")
	require.Equal(t, driver.StateClaimed, r.State)
}

// On a Cluster, Batch runs one pipeline and one WAIT per primary, and each
// claim gets its own primary's verdict: a claim whose primary's replica
// acknowledged it is granted though another primary's replica is stopped,
// whose claims alone are released and answered ErrUnreplicated.
func TestClusterOnePrimarysWaitFailsOnlyItsOwnClaims(t *testing.T) {
	cluster := testenv.StartRedisCluster(t, 3, 1)
	ctx := context.Background()
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
	t.Cleanup(func() { _ = client.Close() })
	require.Eventually(t, func() bool { return client.Ping(ctx).Err() == nil }, 10*time.Second, 50*time.Millisecond)
	s, err := redisstore.New(client, &redisstore.Config{Logger: quiet, WaitReplicas: 1, WaitTimeout: 200 * time.Millisecond})
	require.NoError(t, err)

	// Two keys on two primaries.
	prefix := testenv.Prefix(t)
	slow, fast := prefix+"slow", ""
	slowPrimary, err := client.MasterForKey(ctx, slow)
	require.NoError(t, err)
	for i := 0; fast == ""; i++ {
		k := prefix + "fast" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		p, err := client.MasterForKey(ctx, k)
		require.NoError(t, err)
		if p.Options().Addr != slowPrimary.Options().Addr {
			fast = k
		}
	}
	// Stop the slow key's primary's replica.
	for _, addr := range cluster.Addrs() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		role, err := c.Do(ctx, "ROLE").Slice()
		_ = c.Close()
		require.NoError(t, err)
		if role[0] == "slave" && role[1].(string)+":"+itoa(role[2]) == slowPrimary.Options().Addr {
			cluster.Node(addr).Pause()
		}
	}

	// Control: alone, the fast key's claim is acknowledged.
	t0 := driver.NewToken()
	r, err := s.Claim(ctx, driver.ClaimRequest{Key: fast, Token: t0, Lease: time.Minute})
	require.NoError(t, err, "alone, the fast key's claim is acknowledged")
	require.Equal(t, driver.StateClaimed, r.State)
	require.NoError(t, s.Release(ctx, fast, t0))

	replies, errs, _ := s.Batch(ctx, nil, []driver.ClaimRequest{
		{Key: slow, Token: driver.NewToken(), Lease: time.Minute},
		{Key: fast, Token: driver.NewToken(), Lease: time.Minute},
	})
	require.ErrorIs(t, errs[0], driver.ErrUnreplicated, "the slow primary's replica is stopped")
	require.NoError(t, errs[1], "the fast key's primary and replica acknowledged its claim")
	require.Equal(t, driver.StateClaimed, replies[1].State)
}

func itoa(v any) string {
	switch v := v.(type) {
	case int64:
		return strconv.FormatInt(v, 10)
	case string:
		return v
	}
	return ""
}
