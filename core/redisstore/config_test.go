package redisstore_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// Every bad Config field gets an error of its own that names the package and
// the field; New reads nothing of the server before refusing it.
func TestNewNamesThePackageAndTheBadField(t *testing.T) {
	t.Parallel()
	addr := testenv.ClosedAddr(t)
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _, _ = client.Close(), ring.Close() })
	for _, tc := range []struct {
		client redis.UniversalClient
		cfg    redisstore.Config
		want   string
	}{
		{client, redisstore.Config{WaitReplicas: -1}, "jobonce: redisstore: Config.WaitReplicas must not be negative, got -1"},
		{client, redisstore.Config{WaitTimeout: -time.Second}, "jobonce: redisstore: Config.WaitTimeout must not be negative, got -1s"},
		{ring, redisstore.Config{WaitReplicas: 1}, "jobonce: redisstore: Config.WaitReplicas needs a single-node, Sentinel or Cluster client, not a Ring"},
		{ring, redisstore.Config{WaitAOF: true}, "jobonce: redisstore: Config.WaitAOF needs a single-node, Sentinel or Cluster client, not a Ring"},
		{client, redisstore.Config{Strict: true, SkipEvictionCheck: true}, "jobonce: redisstore: Config.Strict needs the check of the server's settings that Config.SkipEvictionCheck skips"},
	} {
		tc.cfg.Logger = quiet
		_, err := redisstore.New(tc.client, &tc.cfg)
		require.EqualError(t, err, tc.want)
	}
	_, err := redisstore.New(nil, nil)
	require.EqualError(t, err, "jobonce: redisstore: New: client is nil")
}

// A nil client of the types New inspects is an error naming the type, not a
// panic.
func TestNewRefusesANilClientOfEachType(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		client redis.UniversalClient
		want   string
	}{
		{(*redis.Client)(nil), "jobonce: redisstore: New: client is a nil *redis.Client"},
		{(*redis.ClusterClient)(nil), "jobonce: redisstore: New: client is a nil *redis.ClusterClient"},
		{(*redis.Ring)(nil), "jobonce: redisstore: New: client is a nil *redis.Ring"},
	} {
		require.NotPanics(t, func() {
			_, err := redisstore.New(tc.client, &redisstore.Config{Logger: quiet, WaitAOF: true})
			require.EqualError(t, err, tc.want)
		})
	}
}

// A Ring routes a key-less WAIT to any shard, so it would count writes on
// one shard as acknowledged by another's replicas, and load a missing
// script on the wrong shard: New refuses acknowledgement (WaitReplicas,
// WaitAOF) on a Ring, and accepts a Ring without it.
func TestRingRefusesWaitReplicas(t *testing.T) {
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{
		"a": testenv.StartRedisServer(t).Addr, "b": testenv.StartRedisServer(t).Addr}})
	t.Cleanup(func() { _ = ring.Close() })
	for _, cfg := range []redisstore.Config{{WaitReplicas: 1}, {WaitAOF: true}} {
		cfg.Logger = quiet
		_, err := redisstore.New(ring, &cfg)
		require.ErrorContains(t, err, "not a Ring")
	}
	_, err := redisstore.New(ring, &redisstore.Config{Logger: quiet})
	require.NoError(t, err, "without acknowledgement a Ring is fine")
}
