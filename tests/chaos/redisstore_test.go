package chaos_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
	"github.com/jobonce/jobonce/tests/chaos"
)

// TestRedisstore runs the harness through a proxy that the test cuts now
// and then, on top of the faults the harness injects: among them the
// server's own error answers, done markers answered ErrUnreplicated, and
// half of those lost as a failover would lose them.
func TestRedisstore(t *testing.T) {
	prefix := testenv.Prefix(t)
	direct := testenv.Redis(t, prefix)
	flaky := testenv.StartFlaky(t, direct.Options().Addr)
	viaProxy := redis.NewClient(&redis.Options{Addr: flaky.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond, PoolSize: 64})
	t.Cleanup(func() { _ = viaProxy.Close() })

	chaos.Run(t, chaos.Options{
		Store:        redisStore(t, viaProxy),
		Verify:       redisStore(t, direct),
		KeyPrefix:    prefix,
		Duration:     750 * time.Millisecond,
		Cut:          flaky.Cut,
		Restore:      flaky.Restore,
		Refusal:      redisAnswer(t, direct, prefix),
		Unreplicated: true,
		Forget:       func(ctx context.Context, key string) error { return direct.Del(ctx, key).Err() },
	})
	_ = viaProxy.Close()
}

func redisStore(t testing.TB, client redis.UniversalClient) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(client, &redisstore.Config{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	return s
}

// redisAnswer returns the error a Store gives when the server answers its
// call with an error of its own while reachable, as it answers OOM when
// full: here a WRONGTYPE on a key that holds a hash.
func redisAnswer(t *testing.T, client *redis.Client, prefix string) func() error {
	ctx := context.Background()
	key := prefix + "wrongtype"
	require.NoError(t, client.HSet(ctx, key, "f", "v").Err())
	_, err := redisStore(t, client).Claim(ctx, driver.ClaimRequest{Key: key, Token: driver.NewToken(), Lease: time.Second})
	var reply redis.Error
	require.ErrorAs(t, err, &reply, "a claim of a hash is answered by the server")
	return func() error { return err }
}
