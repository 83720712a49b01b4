package redisstore_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// A Ring routes a key-less WAIT to any shard, so it would count writes on
// one shard as acknowledged by another's replicas (20 of 20 claims on a
// shard without a replica were once answered acknowledged), and load a
// missing script on the wrong shard. New refuses acknowledgement on a Ring.
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
