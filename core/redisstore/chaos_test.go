package redisstore_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobonce/jobonce/core/storetest"
	"github.com/jobonce/jobonce/internal/testenv"
)

// TestChaos runs the randomized fault test through a proxy that the test
// cuts now and then, on top of the faults the Chaos store injects.
func TestChaos(t *testing.T) {
	prefix := testenv.Prefix(t)
	direct := testenv.Redis(t, prefix)
	target := direct.Options().Addr
	flaky := testenv.StartFlaky(t, target)
	addr := flaky.Addr()
	viaProxy := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond, PoolSize: 64})
	t.Cleanup(func() { _ = viaProxy.Close() })

	storetest.RunChaos(t, storetest.ChaosOptions{
		Store:     newStore(t, viaProxy),
		Verify:    newStore(t, direct),
		KeyPrefix: prefix,
		Duration:  750 * time.Millisecond,
		Cut:       flaky.Cut,
		Restore:   flaky.Restore,
	})
	_ = viaProxy.Close()
}
