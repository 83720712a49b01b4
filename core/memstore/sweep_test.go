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
