package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/internal/redisops"
)

// TestFenceIsServerTime: a claim's fence is the Redis server's clock in
// microseconds since the Unix epoch, read when the claim was made.
func TestFenceIsServerTime(t *testing.T) {
	t.Parallel()
	prefix, client, s := prefixedStore(t)
	ctx := context.Background()
	before, err := client.Time(ctx).Result()
	require.NoError(t, err)
	r, err := s.Claim(ctx, driver.ClaimRequest{Key: prefix + "k", Token: driver.NewToken(), Lease: time.Minute})
	require.NoError(t, err)
	after, err := client.Time(ctx).Result()
	require.NoError(t, err)
	require.Equal(t, driver.StateClaimed, r.State)
	require.GreaterOrEqual(t, r.Fence, before.UnixMicro())
	require.LessOrEqual(t, r.Fence, after.UnixMicro())
}

// TestClaimWrittenBeforeFences: a running claim in the format written by
// versions before fences ("R", token, fingerprint), as one still held during
// an upgrade, is reported running with its fingerprint, and is not taken.
func TestClaimWrittenBeforeFences(t *testing.T) {
	t.Parallel()
	prefix, client, s := prefixedStore(t)
	ctx := context.Background()
	key, tok := prefix+"old-claim", driver.NewToken()
	require.NoError(t, client.Set(ctx, key, "R"+string(tok[:])+"fp", time.Minute).Err())

	for _, t2 := range []driver.Token{driver.NewToken(), tok} {
		r, err := s.Claim(ctx, driver.ClaimRequest{Key: key, Token: t2, Fingerprint: "fp", Lease: time.Minute})
		require.NoError(t, err)
		require.Equal(t, driver.StateRunning, r.State)
		require.Equal(t, "fp", r.Fingerprint)
		require.Greater(t, r.Remaining, 50*time.Second)
	}
	rec, err := redisops.Inspect(ctx, client, key)
	require.NoError(t, err)
	require.Equal(t, driver.StateRunning, rec.State)
	require.Equal(t, tok, rec.Token)
	require.Zero(t, rec.Fence, "an old claim has no fence")
}
