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
// the sweep of expired entries runs less often the more entries it leaves,
// so a claim costs a bounded number of entry visits however many markers
// are live; and expired entries still never number more than about the
// live ones.
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

	// 20,000 live entries: sweeps are then at least 20,000 claims apart, so
	// visits per claim stay near one, not 20,000/1024.
	for i := range 20_000 {
		claim("live-"+strconv.Itoa(i), time.Hour)
	}
	sweeps, visits := 0, 0
	for i := range 40_000 {
		before := s.claims
		size := len(s.entries)
		claim("short-"+strconv.Itoa(i), time.Millisecond)
		clock = clock.Add(time.Millisecond) // each short claim expires at once
		if s.claims < before {
			sweeps++
			visits += size + 1
		}
		require.LessOrEqual(t, len(s.entries)-20_000, 20_000+1024, "expired entries are swept")
	}
	require.GreaterOrEqual(t, sweeps, 1)
	require.LessOrEqual(t, sweeps, 2, "a sweep waits for as many claims as the entries it left")
	require.Less(t, float64(visits)/40_000, 2.5, "entry visits per claim")
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
