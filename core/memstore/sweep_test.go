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
	s, clock := clocked()
	claim := func(key string, lease time.Duration) { claimFor(t, s, key, driver.NewToken(), lease) }

	const live = 20_000
	for i := range live {
		claim("live-"+strconv.Itoa(i), time.Hour)
	}
	for i := range 40_000 {
		claim("short-"+strconv.Itoa(i), time.Millisecond)
		*clock = clock.Add(time.Millisecond) // each short claim expires at once
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
	s, clock := clocked()
	claim := func(key string, lease time.Duration) { claimFor(t, s, key, driver.NewToken(), lease) }

	const spell = 20_000
	for i := range spell {
		claim("spell-"+strconv.Itoa(i), time.Hour)
	}
	*clock = clock.Add(2 * time.Hour) // the spell's entries all expire
	for i := range 2048 {
		claim("short-"+strconv.Itoa(i), time.Millisecond)
		*clock = clock.Add(time.Millisecond) // each short claim expires at once
	}
	require.Less(t, len(s.entries), 1024+1024,
		"2,048 claims after %d entries expired, with one live, the store still holds %d entries", spell, len(s.entries))
}

// clocked returns a Store whose clock stands still until the test moves it.
func clocked() (*Store, *time.Time) {
	s := New()
	clock := time.Unix(1_800_000_000, 0)
	s.now = func() time.Time { return clock }
	return s, &clock
}

// claimFor claims key for token, requiring the claim to be granted, and
// returns its fence.
func claimFor(t *testing.T, s *Store, key string, token driver.Token, lease time.Duration) int64 {
	t.Helper()
	r, err := s.Claim(context.Background(), driver.ClaimRequest{Key: key, Token: token, Lease: lease})
	require.NoError(t, err)
	require.Equal(t, driver.StateClaimed, r.State)
	return r.Fence
}
