package redisstore_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// A slot moved as redis-cli --cluster reshard moves it, while the Store
// waits for a replica on a Cluster: its primary answers ASK for a key it
// has handed over while the slot migrates, and MOVED once it is done. Each
// write follows the redirect, and the wait that judges it runs on the node
// that did it.
func TestClusterWaitFollowsASlotMigration(t *testing.T) {
	cluster := testenv.StartRedisCluster(t, 3, 1)
	ctx := context.Background()
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
	t.Cleanup(func() { _ = client.Close() })
	require.Eventually(t, func() bool { return client.Ping(ctx).Err() == nil }, 10*time.Second, 50*time.Millisecond)
	s, err := redisstore.New(client, &redisstore.Config{Logger: quiet, WaitReplicas: 1, WaitTimeout: 2 * time.Second})
	require.NoError(t, err)

	// begin starts moving key's slot to another primary.
	begin := func(t *testing.T, key string) *testenv.SlotMigration {
		slot := cluster.KeySlot(t, key)
		owner := cluster.SlotOwner(t, slot)
		for _, p := range cluster.Primaries(t) {
			if p != owner {
				return cluster.BeginSlotMigration(t, slot, p)
			}
		}
		t.Fatal("no other primary")
		return nil
	}
	// finish ends the migration; the Cluster client's slot map still names
	// the old owner, so the next call meets MOVED.
	finish := func(t *testing.T, m *testenv.SlotMigration, key string) {
		m.Finish(t)
		owner, err := client.MasterForKey(ctx, key)
		require.NoError(t, err)
		require.Equal(t, m.From.Addr, owner.Options().Addr, "the client's slot map is stale")
	}
	// onReplica requires key on a replica of m.To (SCAN is served whatever
	// slots the node serves).
	onReplica := func(t *testing.T, m *testenv.SlotMigration, key string) {
		replicas := cluster.ReplicasOf(t, m.To)
		require.NotEmpty(t, replicas)
		found := false
		for _, r := range replicas {
			keys, _, err := r.Client().Scan(ctx, 0, "*", 1<<20).Result() // keys may hold glob characters
			require.NoError(t, err)
			found = found || slices.Contains(keys, key)
		}
		require.True(t, found, "the write was acknowledged by a replica of the node that did it, %s", m.To.Addr)
	}

	t.Run("AMarkerMeetsASKThenItsDuplicateMeetsMOVED", func(t *testing.T) {
		g, err := core.New(s, &core.Config{Logger: quiet, KeyPrefix: testenv.Prefix(t), StoreTimeout: time.Second})
		require.NoError(t, err)
		key, err := g.StoredKey("job")
		require.NoError(t, err)
		var m *testenv.SlotMigration
		runs := 0
		out, err := g.Do(ctx, "job", func(context.Context) error {
			runs++
			m = begin(t, key)
			require.Equal(t, 1, m.MoveKeys(t), "the claim moved to the importing primary")
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, core.Ran, out, "the marker was written where the key is now, and acknowledged")
		v, _ := readAsking(t, m.To, key)
		require.True(t, strings.HasPrefix(v, "w"), "a done marker on %s, not %q", m.To.Addr, v)
		onReplica(t, m, key)

		finish(t, m, key)
		out, err = g.Do(ctx, "job", func(context.Context) error { runs++; return nil })
		require.NoError(t, err)
		require.Equal(t, core.Duplicate, out, "the redelivery found the marker on the slot's new owner")
		require.Equal(t, 1, runs)
	})

	t.Run("AClaimMeetsASKThenAnotherMeetsMOVED", func(t *testing.T) {
		prefix := testenv.Prefix(t)
		key := prefix + "claim"
		m := begin(t, key)
		other := prefix + "other"
		for cluster.SlotOwner(t, cluster.KeySlot(t, other)) != m.From || cluster.KeySlot(t, other) == m.Slot {
			other += "x"
		}
		tok := driver.NewToken()
		replies, errs, _ := s.Batch(ctx, nil, []driver.ClaimRequest{
			{Key: key, Token: tok, Lease: time.Minute},
			{Key: other, Token: driver.NewToken(), Lease: time.Minute},
		})
		require.NoError(t, errs[0], "the claim followed ASK to %s", m.To.Addr)
		require.Equal(t, driver.StateClaimed, replies[0].State)
		require.NoError(t, errs[1], "a claim on the migrating slot's owner, in the same batch")
		require.Equal(t, driver.StateClaimed, replies[1].State)
		v, _ := readAsking(t, m.To, key)
		require.True(t, strings.HasPrefix(v, "F"), "a claim on %s, not %q", m.To.Addr, v)
		onReplica(t, m, key)

		finish(t, m, key)
		r, err := s.Claim(ctx, driver.ClaimRequest{Key: key, Token: driver.NewToken(), Lease: time.Minute})
		require.NoError(t, err, "the claim followed MOVED to %s", m.To.Addr)
		require.Equal(t, driver.StateRunning, r.State, "the first claim holds the key on the slot's new owner")
		r, err = s.Claim(ctx, driver.ClaimRequest{Key: key, Token: tok, Lease: time.Minute})
		require.NoError(t, err)
		require.Equal(t, driver.StateClaimed, r.State, "the first claim's request sent again is its own")
		require.Equal(t, replies[0].Fence, r.Fence)
	})

	t.Run("AnExtensionMeetsASKThenMOVED", func(t *testing.T) {
		key := testenv.Prefix(t) + "extend"
		tok := driver.NewToken()
		r, err := s.Claim(ctx, driver.ClaimRequest{Key: key, Token: tok, Lease: 10 * time.Second})
		require.NoError(t, err)
		require.Equal(t, driver.StateClaimed, r.State)
		m := begin(t, key)
		require.Equal(t, 1, m.MoveKeys(t))

		require.NoError(t, s.Extend(ctx, key, tok, time.Minute), "the extension followed ASK to %s", m.To.Addr)
		_, ttl := readAsking(t, m.To, key)
		require.Greater(t, ttl, 30*time.Second, "the lease was renewed on %s", m.To.Addr)
		require.ErrorIs(t, s.Extend(ctx, key, driver.NewToken(), time.Minute), core.ErrLeaseLost,
			"another token's extension is answered by the key's node")

		finish(t, m, key)
		require.NoError(t, s.Extend(ctx, key, tok, 2*time.Minute), "the extension followed MOVED to %s", m.To.Addr)
		ttl, err = m.To.Client().PTTL(ctx, key).Result()
		require.NoError(t, err)
		require.Greater(t, ttl, 90*time.Second, "the lease was renewed on %s", m.To.Addr)
	})
}

// readAsking returns key's value and remaining TTL on s, a primary that may
// be importing key's slot (each read follows ASKING).
func readAsking(t *testing.T, s *testenv.RedisServer, key string) (string, time.Duration) {
	t.Helper()
	ctx := context.Background()
	conn := s.Client().Conn()
	defer conn.Close()
	var get *redis.StringCmd
	var ttl *redis.DurationCmd
	_, err := conn.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Do(ctx, "ASKING")
		get = p.Get(ctx, key)
		p.Do(ctx, "ASKING")
		ttl = p.PTTL(ctx, key)
		return nil
	})
	require.NoError(t, err, "read %s on %s", key, s.Addr)
	return get.Val(), ttl.Val()
}
