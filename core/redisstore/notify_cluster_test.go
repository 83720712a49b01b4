package redisstore_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// heard is a Store whose Listeners record, in order, the keys they
// notify, so that a test tells a copy woken by the signal from one woken by
// its own timer.
type heard struct {
	*redisstore.Store
	mu   sync.Mutex
	keys []string
}

func (h *heard) Listen(ctx context.Context, notify func(string)) (driver.Listener, error) {
	return h.Store.Listen(ctx, func(key string) {
		h.mu.Lock()
		h.keys = append(h.keys, key)
		h.mu.Unlock()
		notify(key)
	})
}

// mark returns how many notifications came so far.
func (h *heard) mark() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.keys)
}

// since reports whether key was notified after mark m.
func (h *heard) since(m int, key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Contains(h.keys[m:], key)
}

// clusterGuard starts a cluster of three primaries and returns a client,
// its Store wrapped in heard, and a Guard on it with plain keys under
// prefix.
func clusterGuard(t *testing.T, prefix string) (*testenv.RedisCluster, *redis.ClusterClient, *heard, *core.Guard) {
	t.Helper()
	cluster := testenv.StartRedisCluster(t, 3, 0)
	ctx := context.Background()
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	require.Eventually(t, func() bool { return client.Ping(ctx).Err() == nil }, 10*time.Second, 50*time.Millisecond)
	s, err := redisstore.New(client, &redisstore.Config{Logger: quiet})
	require.NoError(t, err)
	h := &heard{Store: s}
	g, err := core.New(h, &core.Config{KeyPrefix: prefix, PlainKeys: true, Logger: quiet, WaitingShare: 1}) // every copy may wait: they test the signal
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })
	return cluster, client, h, g
}

// awaitedOn returns once key's awaited mark is set on the cluster: a
// waiting copy read the key after its subscription was confirmed.
func awaitedOn(t *testing.T, client *redis.ClusterClient, key string) {
	t.Helper()
	mark := key + "{" + key + "}\x00awaited"
	require.Eventually(t, func() bool { return client.Exists(context.Background(), mark).Val() == 1 }, 10*time.Second, time.Millisecond,
		"no copy marked %q awaited", key)
}

// shardSubscribers returns how many connections of the node at addr are
// subscribed to key's shard channel.
func shardSubscribers(t *testing.T, addr, key string) int64 {
	t.Helper()
	node := redis.NewClient(&redis.Options{Addr: addr})
	defer node.Close()
	n, err := node.PubSubShardNumSub(context.Background(), key).Result()
	require.NoError(t, err)
	return n[key]
}

// TestClusterListenerSubscribesEveryKeyAgainAfterItsConnectionBreaks: two
// copies wait for keys of different slots on one primary; the Listener's
// connection to it is killed. The Listener subscribes each key again (one
// SSUBSCRIBE of both is refused: CROSSSLOT), and the holders' done markers
// wake the copies through the signal, not their timers.
func TestClusterListenerSubscribesEveryKeyAgainAfterItsConnectionBreaks(t *testing.T) {
	prefix := testenv.Prefix(t)
	_, client, h, g := clusterGuard(t, prefix)
	ctx := context.Background()

	// Two keys of one primary in different slots.
	var keys []string
	var addr string
	slots := map[int64]bool{}
	for i := 0; len(keys) < 2; i++ {
		key := "k" + strconv.Itoa(i)
		primary, err := client.MasterForKey(ctx, prefix+key)
		require.NoError(t, err)
		slot, err := client.ClusterKeySlot(ctx, prefix+key).Result()
		require.NoError(t, err)
		if (addr == "" || primary.Options().Addr == addr) && !slots[slot] {
			addr, slots[slot] = primary.Options().Addr, true
			keys = append(keys, key)
		}
	}
	holds := make([]held, len(keys))
	copies := make([]<-chan core.Result, len(keys))
	for i, key := range keys {
		holds[i] = holdKey(t, h.Store, prefix+key)
		copies[i] = waiting(ctx, g, key, time.Minute)
	}
	for _, hd := range holds {
		awaitedOn(t, client, hd.key)
	}

	m := h.mark()
	node := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = node.Close() })
	require.NoError(t, node.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err())
	for _, hd := range holds {
		require.Eventually(t, func() bool { return h.since(m, hd.key) && shardSubscribers(t, addr, hd.key) == 1 }, 10*time.Second, time.Millisecond,
			"the Listener did not subscribe to %q again after its connection was killed", hd.key)
	}

	for i, hd := range holds {
		m := h.mark()
		hd.complete(t, h.Store)
		require.Equal(t, core.Duplicate, (<-copies[i]).Outcome)
		require.True(t, h.since(m, hd.key), "the copy of %q was woken by its timer, not the done marker's signal", hd.key)
	}
}

// TestClusterListenerFollowsAKeysSlotToItsNewOwner: a copy waits for a key
// whose slot then moves to another primary, which ends its subscription
// there (SUNSUBSCRIBE). The Listener subscribes to the key at its new
// owner, and the holder's done marker wakes the copy through the signal.
func TestClusterListenerFollowsAKeysSlotToItsNewOwner(t *testing.T) {
	prefix := testenv.Prefix(t)
	cluster, client, h, g := clusterGuard(t, prefix)
	ctx := context.Background()
	key := prefix + "moving"
	hd := holdKey(t, h.Store, key)
	second := waiting(ctx, g, "moving", time.Minute)
	awaitedOn(t, client, key)

	slot := cluster.KeySlot(t, key)
	from := cluster.SlotOwner(t, slot)
	var to *testenv.RedisServer
	for _, p := range cluster.Primaries(t) {
		if p != from {
			to = p
			break
		}
	}
	cluster.MigrateSlot(t, slot, to)
	require.Eventually(t, func() bool { return shardSubscribers(t, to.Addr, key) == 1 }, 10*time.Second, time.Millisecond,
		"the Listener did not subscribe to the key at its slot's new owner")

	m := h.mark()
	hd.complete(t, h.Store)
	require.Equal(t, core.Duplicate, (<-second).Outcome)
	require.True(t, h.since(m, key), "the copy was woken by its timer, not the done marker's signal")
}
