package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// readyGuard returns a Guard on s whose calls to the store end within
// storeTimeout.
func readyGuard(t *testing.T, s *redisstore.Store, storeTimeout time.Duration) *core.Guard {
	t.Helper()
	g, err := core.New(s, &core.Config{Logger: quiet, StoreTimeout: storeTimeout})
	require.NoError(t, err)
	return g
}

// A Guard on a Redis that answers is ready.
func TestReadyWhenRedisAnswers(t *testing.T) {
	t.Parallel()
	s := newStore(t, testenv.Redis(t, ""))
	require.NoError(t, s.Ready(context.Background()))
	require.NoError(t, readyGuard(t, s, time.Second).Ready(context.Background()))
}

// A Guard on a Redis it cannot reach answers ErrStoreUnavailable with the
// cause, never a risk.
func TestReadyOfAnUnreachableRedisIsUnavailable(t *testing.T) {
	t.Parallel()
	s, err := redisstore.New(startupClient(t, "127.0.0.1:1"), &redisstore.Config{Logger: quiet})
	require.NoError(t, err, "without Strict, New warns")
	err = readyGuard(t, s, time.Second).Ready(context.Background())
	require.ErrorIs(t, err, core.ErrStoreUnavailable)
	require.NotErrorIs(t, err, core.ErrStoreRisk)
	require.ErrorContains(t, err, "jobonce: redisstore: PING on 127.0.0.1:1: dial tcp 127.0.0.1:1")
	require.ErrorContains(t, err, "connection refused")
}

// A client that retries its dials (go-redis's default) runs out a readiness
// probe's short deadline: Ready's error, the deadline's, still names the
// server it could not reach.
func TestReadyOfAnUnreachableRedisNamesItsAddress(t *testing.T) {
	t.Parallel()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	s, err := redisstore.New(client, &redisstore.Config{Logger: quiet, SkipEvictionCheck: true})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err = readyGuard(t, s, 5*time.Second).Ready(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "jobonce: redisstore: PING on 127.0.0.1:1: ")
}

// A Redis that stops answering (SIGSTOP) makes Ready answer
// ErrStoreUnavailable within the Guard's StoreTimeout, whatever the
// client's ContextTimeoutEnabled and ReadTimeout.
func TestReadyAnswersWithinStoreTimeoutWhateverTheClient(t *testing.T) {
	t.Parallel()
	server := testenv.StartRedisServer(t, "--appendonly", "yes")
	var guards []*core.Guard
	for _, opt := range []redis.Options{
		{ContextTimeoutEnabled: true},
		{}, // ReadTimeout 3s, not bound by the context
		{ReadTimeout: -1},
	} {
		opt.Addr, opt.MaxRetries = server.Addr, -1
		client := redis.NewClient(&opt)
		t.Cleanup(func() { _ = client.Close() })
		s, err := redisstore.New(client, &redisstore.Config{Logger: quiet, Strict: true})
		require.NoError(t, err)
		g := readyGuard(t, s, 300*time.Millisecond)
		require.NoError(t, g.Ready(context.Background()))
		guards = append(guards, g)
	}
	server.Pause()
	for i, g := range guards {
		start := time.Now()
		err := g.Ready(context.Background())
		require.Less(t, time.Since(start), 2500*time.Millisecond, "client %d: bounded by StoreTimeout", i)
		require.ErrorIs(t, err, core.ErrStoreUnavailable, "client %d", i)
	}
	server.Resume()
	for i, g := range guards {
		require.NoError(t, g.Ready(context.Background()), "client %d", i)
	}
}

// A Redis that goes down makes Ready answer ErrStoreUnavailable, and ready
// again once it is back.
func TestReadyFollowsRedisGoingDownAndComingBack(t *testing.T) {
	t.Parallel()
	server := testenv.StartRedisServer(t, "--appendonly", "yes")
	s, err := redisstore.New(startupClient(t, server.Addr), &redisstore.Config{Logger: quiet, Strict: true})
	require.NoError(t, err)
	g := readyGuard(t, s, time.Second)
	require.NoError(t, g.Ready(context.Background()))
	server.Kill()
	require.ErrorIs(t, g.Ready(context.Background()), core.ErrStoreUnavailable)
	server.Restart()
	require.NoError(t, g.Ready(context.Background()))
}

// Under Strict, Ready reports a risk the servers' check finds at run time
// (here at each call, CheckEvery being short) as ErrStoreRisk, naming the
// setting, and is ready again once it is fixed; without Strict, the risk is
// the watch's warning and Ready answers nil.
func TestStrictReadyReportsARiskThatAppearsAtRunTime(t *testing.T) {
	t.Parallel()
	server := testenv.StartRedisServer(t, "--appendonly", "yes")
	ready := func(strict bool) func() error {
		s, err := redisstore.New(startupClient(t, server.Addr), &redisstore.Config{Logger: quiet, Strict: strict, CheckEvery: time.Nanosecond})
		require.NoError(t, err)
		g := readyGuard(t, s, time.Second)
		return func() error { return g.Ready(context.Background()) }
	}
	strict, lax := ready(true), ready(false)
	require.NoError(t, strict())

	ctx := context.Background()
	require.NoError(t, server.Client().ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err())
	err := strict()
	require.ErrorIs(t, err, core.ErrStoreRisk)
	require.NotErrorIs(t, err, core.ErrStoreUnavailable)
	require.EqualError(t, err, "jobonce: redisstore: Ready: Config.Strict refuses Redis at "+server.Addr+
		": maxmemory-policy allkeys-lru: duplicates can run after memory pressure evicts done markers; use noeviction")
	require.NoError(t, lax())

	require.NoError(t, server.Client().ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	require.NoError(t, strict())
}

// On a Cluster, Ready sends PING to every primary: one that is down makes
// it unavailable, whichever node a key-less command would have gone to.
func TestReadyReachesEveryClusterPrimary(t *testing.T) {
	t.Parallel()
	cluster := testenv.StartRedisCluster(t, 3, 0)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), ContextTimeoutEnabled: true, MaxRedirects: -1})
	t.Cleanup(func() { _ = client.Close() })
	s, err := redisstore.New(client, &redisstore.Config{Logger: quiet})
	require.NoError(t, err)
	g := readyGuard(t, s, time.Second)
	require.NoError(t, g.Ready(context.Background()))

	down := cluster.Nodes[2]
	down.Kill()
	for i := range 5 {
		err := g.Ready(context.Background())
		require.ErrorIs(t, err, core.ErrStoreUnavailable, fmt.Sprintf("call %d", i))
		require.ErrorContains(t, err, down.Addr)
	}
}

// A Redis that answers PING but refuses every claim is not ready: a
// read-only replica, a user without EVALSHA, and one whose rights stop
// short of the writes the claim's script makes. Ready says so, as
// ErrStoreUnavailable naming the server's refusal, and a Guard on the same
// Redis with a user of full rights is ready and leaves no key behind.
func TestReadyRefusesARedisThatRefusesEveryClaim(t *testing.T) {
	t.Parallel()
	primary, replicas := testenv.StartRedisReplicas(t, 1, "--appendonly", "yes")
	ctx := context.Background()
	for _, acl := range [][]string{
		{"noscript", "on", ">pw", "~*", "&*", "+@all", "-evalsha", "-eval"},
		{"readonly", "on", ">pw", "~*", "&*", "+@read", "+@connection", "+info", "+config|get", "+evalsha", "+eval", "+script"},
	} {
		args := []any{"ACL", "SETUSER"}
		for _, a := range acl {
			args = append(args, a)
		}
		require.NoError(t, primary.Client().Do(ctx, args...).Err())
	}
	guard := func(opt redis.Options) *core.Guard {
		opt.ContextTimeoutEnabled, opt.MaxRetries = true, -1
		client := redis.NewClient(&opt)
		t.Cleanup(func() { _ = client.Close() })
		s, err := redisstore.New(client, &redisstore.Config{Logger: quiet})
		require.NoError(t, err)
		g, err := core.New(s, &core.Config{Logger: quiet, StoreTimeout: 2 * time.Second, KeyPrefix: "ready:"})
		require.NoError(t, err)
		t.Cleanup(func() { _ = g.Close() })
		return g
	}
	for name, opt := range map[string]redis.Options{
		"read-only replica": {Addr: replicas[0].Addr},
		"no EVALSHA":        {Addr: primary.Addr, Username: "noscript", Password: "pw"},
		"no writes":         {Addr: primary.Addr, Username: "readonly", Password: "pw"},
	} {
		g := guard(opt)
		out, err := g.Do(ctx, "job", func(context.Context) error { return nil })
		require.Equal(t, core.Unavailable, out, "%s: every claim fails", name)
		require.ErrorIs(t, err, core.ErrStoreUnavailable, name)
		err = g.Ready(ctx)
		require.ErrorIs(t, err, core.ErrStoreUnavailable, "%s: Ready", name)
		require.NotErrorIs(t, err, core.ErrStoreRisk, name)
	}
	g := guard(redis.Options{Addr: primary.Addr})
	for range 3 {
		require.NoError(t, g.Ready(ctx))
	}
	keys, err := primary.Client().Keys(ctx, "*").Result()
	require.NoError(t, err)
	require.Empty(t, keys, "Ready leaves no key behind")
}
