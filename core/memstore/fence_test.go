package memstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core/driver"
)

// TestFencesOutliveTheirKeys: a key's fences increase even when the clock
// stands still or steps back, after a release, a lapsed lease and the sweep
// of expired entries, because the Store keeps each key's last fence.
func TestFencesOutliveTheirKeys(t *testing.T) {
	s, clock := clocked()
	ctx := context.Background()
	claim := func(key string, lease time.Duration) (driver.Token, int64) {
		tok := driver.NewToken()
		return tok, claimFor(t, s, key, tok, lease)
	}

	tok, first := claim("k", time.Minute)
	require.Equal(t, clock.UnixMicro(), first)
	require.NoError(t, s.Release(ctx, "k", tok))
	_, second := claim("k", time.Millisecond)
	require.Equal(t, first+1, second, "the clock stood still")

	// The lease lapses, a sweep drops the claim, and the clock steps back
	// before the key is claimed again.
	*clock = clock.Add(2 * time.Millisecond)
	for i := range 1100 {
		claim("other-"+strconv.Itoa(i), time.Minute)
	}
	*clock = clock.Add(-time.Hour)
	_, third := claim("k", time.Minute)
	require.Equal(t, second+1, third, "the clock stepped back")
	require.Equal(t, 1101, s.len())
}
