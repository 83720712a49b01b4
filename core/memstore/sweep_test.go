package memstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core/driver"
)

// TestSweepKeepsMemoryBoundedAndIsAmortized: with many live done markers,
// each claim drops the entries that have expired, and no more work: the
// store holds the live entries and the one just claimed, and its queue of
// expiries holds one item per entry still to expire, however many claims
// are made.
func TestSweepKeepsMemoryBoundedAndIsAmortized(t *testing.T) {
	s := New()
	clock := time.Unix(1_800_000_000, 0)
	s.now = func() time.Time { return clock }
	ctx := context.Background()
	claim := func(key string, lease time.Duration) {
		t.Helper()
		r, err := s.Claim(ctx, driver.ClaimRequest{Key: key, Token: driver.NewToken(), Lease: lease})
		require.NoError(t, err)
		require.Equal(t, driver.StateClaimed, r.State)
	}

	const live = 20_000
	for i := range live {
		claim("live-"+strconv.Itoa(i), time.Hour)
	}
	for i := range 40_000 {
		claim("short-"+strconv.Itoa(i), time.Millisecond)
		clock = clock.Add(time.Millisecond) // each short claim expires at once
		require.LessOrEqual(t, len(s.entries), live+1, "expired entries are dropped at the next claim")
		require.LessOrEqual(t, len(s.expiring), live+1, "an expiry is queued once and taken once")
	}
}

// TestSweepDropsEntriesSoonAfterTheyExpire: when the done markers of a busy
// spell expire together, the claims that follow (of short-lived keys, so
// that hardly any entry is live) sweep them within a bounded number of
// claims, so the memory stays near the live entries, as the sweep's doc
// says, not near the entries that were live at the last sweep.
func TestSweepDropsEntriesSoonAfterTheyExpire(t *testing.T) {
	s := New()
	clock := time.Unix(1_800_000_000, 0)
	s.now = func() time.Time { return clock }
	ctx := context.Background()
	claim := func(key string, lease time.Duration) {
		t.Helper()
		r, err := s.Claim(ctx, driver.ClaimRequest{Key: key, Token: driver.NewToken(), Lease: lease})
		require.NoError(t, err)
		require.Equal(t, driver.StateClaimed, r.State)
	}

	const spell = 20_000
	for i := range spell {
		claim("spell-"+strconv.Itoa(i), time.Hour)
	}
	clock = clock.Add(2 * time.Hour) // the spell's entries all expire
	for i := range 2048 {
		claim("short-"+strconv.Itoa(i), time.Millisecond)
		clock = clock.Add(time.Millisecond) // each short claim expires at once
	}
	require.Less(t, len(s.entries), 1024+1024,
		"2,048 claims after %d entries expired, with one live, the store still holds %d entries", spell, len(s.entries))
}
