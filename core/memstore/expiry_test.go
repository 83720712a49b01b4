package memstore

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestExpiryQueueTakesExpiriesInOrder: whatever order expiries are added
// in, due takes each once, earliest first, and only once it is due.
func TestExpiryQueueTakesExpiriesInOrder(t *testing.T) {
	base := time.Unix(1_800_000_000, 0)
	var q expiryQueue
	var want []time.Time
	for range 1000 {
		at := base.Add(time.Duration(rand.IntN(500)) * time.Millisecond)
		q.add(at.String(), at)
		want = append(want, at)
	}
	slices.SortFunc(want, func(a, b time.Time) int { return a.Compare(b) })
	_, ok := q.due(base.Add(-time.Millisecond))
	require.False(t, ok, "nothing is due before the earliest expiry")
	for _, at := range want {
		key, ok := q.due(base.Add(time.Second))
		require.True(t, ok)
		require.Equal(t, at.String(), key)
	}
	_, ok = q.due(base.Add(time.Hour))
	require.False(t, ok, "each expiry is taken once")
}
