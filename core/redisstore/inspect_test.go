package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/internal/redisops"
)

// A claim's Age is the server's clock at the inspection less its fence, so
// Age plus TTL is the lease it was taken with until a renewal adds to it.
func TestInspectDatesAClaimByTheServersClock(t *testing.T) {
	t.Parallel()
	prefix, client, s := prefixedStore(t)
	ctx := context.Background()
	key, tok, lease := prefix+"k", driver.NewToken(), time.Minute
	r, err := s.Claim(ctx, driver.ClaimRequest{Key: key, Token: tok, Lease: lease})
	require.NoError(t, err)

	rec, err := redisops.Inspect(ctx, client, key)
	require.NoError(t, err)
	after, err := client.Time(ctx).Result()
	require.NoError(t, err)
	require.Positive(t, rec.Age)
	require.LessOrEqual(t, rec.Age, after.Sub(time.UnixMicro(r.Fence)))
	require.InDelta(t, lease, rec.Age+rec.TTL, float64(2*time.Millisecond), "never renewed: age %s, lease left %s", rec.Age, rec.TTL)

	// Renewed 30ms or more after the claim.
	deadline := time.Now().Add(5 * time.Second)
	for rec.Age < 30*time.Millisecond {
		require.True(t, time.Now().Before(deadline), "the claim's age stays %s", rec.Age)
		rec, err = redisops.Inspect(ctx, client, key)
		require.NoError(t, err)
	}
	require.NoError(t, s.Extend(ctx, key, tok, lease))
	rec, err = redisops.Inspect(ctx, client, key)
	require.NoError(t, err)
	require.Greater(t, rec.Age+rec.TTL, lease+29*time.Millisecond, "renewed: age %s, lease left %s", rec.Age, rec.TTL)

	require.NoError(t, client.Set(ctx, key, "R"+string(tok[:])+"fp", time.Minute).Err())
	rec, err = redisops.Inspect(ctx, client, key)
	require.NoError(t, err)
	require.Zero(t, rec.Age, "a claim without a fence cannot be dated")
}

// Value is the key's value as stored, running or done, so a caller can
// change the key only while it still holds what was read.
func TestInspectReturnsTheStoredValue(t *testing.T) {
	t.Parallel()
	prefix, client, s := prefixedStore(t)
	ctx := context.Background()
	key, tok := prefix+"k", driver.NewToken()
	r, err := s.Claim(ctx, driver.ClaimRequest{Key: key, Token: tok, Lease: time.Minute, Fingerprint: "fp"})
	require.NoError(t, err)

	rec, err := redisops.Inspect(ctx, client, key)
	require.NoError(t, err)
	v, err := client.Get(ctx, key).Result()
	require.NoError(t, err)
	require.Equal(t, v, rec.Value)

	require.NoError(t, s.Complete(ctx, driver.CompleteRequest{Key: key, Token: tok, Fence: r.Fence, Fingerprint: "fp", Result: []byte("r"), Retention: time.Minute}))
	rec, err = redisops.Inspect(ctx, client, key)
	require.NoError(t, err)
	require.Equal(t, driver.StateDone, rec.State)
	v, err = client.Get(ctx, key).Result()
	require.NoError(t, err)
	require.Equal(t, v, rec.Value)
	require.NotEqual(t, "", rec.Value)

	require.NoError(t, client.Del(ctx, key).Err())
	rec, err = redisops.Inspect(ctx, client, key)
	require.NoError(t, err)
	require.Empty(t, rec.Value, "an absent key has no value")
}

// ReadHead, given the first HeadLen bytes of a value, tells what Inspect
// tells of the whole value but its fingerprint and result: running claims
// with and without a fence, done markers of every form, and values jobonce
// did not write.
func TestReadHeadTellsWhatInspectTells(t *testing.T) {
	t.Parallel()
	prefix, client, s := prefixedStore(t)
	ctx := context.Background()
	claimed, tok := prefix+"claimed", driver.NewToken()
	_, err := s.Claim(ctx, driver.ClaimRequest{Key: claimed, Token: tok, Lease: time.Minute, Fingerprint: strings.Repeat("f", 40)})
	require.NoError(t, err)
	done, doneTok := prefix+"done", driver.NewToken()
	_, err = s.Claim(ctx, driver.ClaimRequest{Key: done, Token: doneTok, Lease: time.Minute})
	require.NoError(t, err)
	require.NoError(t, s.Complete(ctx, driver.CompleteRequest{Key: done, Token: doneTok, Retention: time.Hour, Result: []byte("result")}))
	values := map[string]string{
		"unfenced":  "R" + string(tok[:]) + "fp",
		"legacy":    "dfp",
		"long":      "D" + string([]byte{200}) + strings.Repeat("f", 200) + "result",
		"uvarint":   "L" + string([]byte{0x90, 0x03}) + strings.Repeat("f", 400),
		"foreign":   "hello",
		"awaited":   "a",
		"truncated": "F" + string(tok[:3]),
	}
	for name, v := range values {
		require.NoError(t, client.Set(ctx, prefix+name, v, time.Hour).Err())
	}

	for _, name := range []string{"claimed", "done", "unfenced", "legacy", "long", "uvarint", "foreign", "awaited", "truncated"} {
		key := prefix + name
		head, err := client.GetRange(ctx, key, 0, redisops.HeadLen-1).Result()
		require.NoError(t, err)
		ttl, err := client.PTTL(ctx, key).Result()
		require.NoError(t, err)
		now, err := client.Time(ctx).Result()
		require.NoError(t, err)
		got, ok := redisops.ReadHead(head, ttl, now)
		want, err := redisops.Inspect(ctx, client, key)
		if err != nil {
			require.False(t, ok, "%s: a value Inspect cannot read: %v", name, err)
			continue
		}
		require.True(t, ok, name)
		require.Equal(t, want.State, got.State, name)
		require.Equal(t, want.Token, got.Token, name)
		require.Equal(t, want.Fence, got.Fence, name)
		require.InDelta(t, want.Age, got.Age, float64(time.Second), name)
		require.Equal(t, ttl, got.TTL, name)
	}
}
