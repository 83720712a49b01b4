package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/storetest"
	"github.com/jobonce/jobonce/internal/testenv"
)

// TestChaos runs the randomized fault test through a proxy that the test
// cuts now and then, on top of the faults the Chaos store injects: among
// them the server's own error answers, done markers answered
// ErrUnreplicated, and half of those lost as a failover would lose them.
func TestChaos(t *testing.T) {
	prefix := testenv.Prefix(t)
	direct := testenv.Redis(t, prefix)
	target := direct.Options().Addr
	flaky := testenv.StartFlaky(t, target)
	addr := flaky.Addr()
	viaProxy := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond, PoolSize: 64})
	t.Cleanup(func() { _ = viaProxy.Close() })

	storetest.RunChaos(t, storetest.ChaosOptions{
		Store:        newStore(t, viaProxy),
		Verify:       newStore(t, direct),
		KeyPrefix:    prefix,
		Duration:     750 * time.Millisecond,
		Cut:          flaky.Cut,
		Restore:      flaky.Restore,
		Refusal:      serverAnswer(t, direct, prefix),
		Unreplicated: true,
		Forget:       func(ctx context.Context, key string) error { return direct.Del(ctx, key).Err() },
	})
	_ = viaProxy.Close()
}

// serverAnswer returns the error a Store gives when the server answers its
// call with an error of its own while reachable, as it answers OOM when
// full: here a WRONGTYPE on a key that holds a hash.
func serverAnswer(t *testing.T, client *redis.Client, prefix string) func() error {
	ctx := context.Background()
	key := prefix + "wrongtype"
	require.NoError(t, client.HSet(ctx, key, "f", "v").Err())
	_, err := newStore(t, client).Claim(ctx, driver.ClaimRequest{Key: key, Token: driver.NewToken(), Lease: time.Second})
	var reply redis.Error
	require.ErrorAs(t, err, &reply, "a claim of a hash is answered by the server")
	return func() error { return err }
}
