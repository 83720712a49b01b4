package dynamostore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/dynamostore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// offBy returns a clock d ahead of this process's (behind when negative).
func offBy(d time.Duration) func() time.Time { return func() time.Time { return time.Now().Add(d) } }

// TestClockSkew: two processes on one table whose clocks differ by 600ms.
// Within the ClockSkew margin, the process whose clock is ahead does not
// take a live lease of the one behind, which keeps extending it; with a
// margin smaller than the skew it takes it at once. Fences still increase
// when the process behind claims after the one ahead.
func TestClockSkew(t *testing.T) {
	testenv.Short(t)
	srv := dynalite(t)
	ctx := ctxT(t)
	for _, tc := range []struct {
		skew  time.Duration
		taken bool
	}{{time.Second, false}, {time.Millisecond, true}} {
		base := newStore(t, srv, &dynamostore.Config{ClockSkew: tc.skew})
		behind, err := dynamostore.New(ctx, client(srv.endpoint), &dynamostore.Config{Table: base.Table(), ClockSkew: tc.skew})
		require.NoError(t, err)
		ahead, err := dynamostore.New(ctx, client(srv.endpoint), &dynamostore.Config{Table: base.Table(), ClockSkew: tc.skew})
		require.NoError(t, err)
		dynamostore.SetClock(behind, offBy(-300*time.Millisecond))
		dynamostore.SetClock(ahead, offBy(300*time.Millisecond))

		holder := driver.NewToken()
		r, err := behind.Claim(ctx, driver.ClaimRequest{Key: "k", Token: holder, Lease: 500 * time.Millisecond})
		require.NoError(t, err)
		require.Equal(t, driver.StateClaimed, r.State)
		r, err = ahead.Claim(ctx, driver.ClaimRequest{Key: "k", Token: driver.NewToken(), Lease: time.Minute})
		require.NoError(t, err)
		if tc.taken {
			require.Equal(t, driver.StateClaimed, r.State, "a margin under the skew lets the clock ahead take a live lease")
			require.ErrorIs(t, behind.Extend(ctx, "k", holder, time.Minute), driver.ErrLeaseLost)
			continue
		}
		require.Equal(t, driver.StateRunning, r.State, "ClockSkew %s: the clock ahead finds the lease live", tc.skew)
		require.Positive(t, r.Remaining)
		require.NoError(t, behind.Extend(ctx, "k", holder, time.Minute), "the holder keeps its lease")
		require.NoError(t, behind.Release(ctx, "k", holder))

		// Fences increase from the clock ahead to the clock behind.
		tok := driver.NewToken()
		r, err = ahead.Claim(ctx, driver.ClaimRequest{Key: "f", Token: tok, Lease: time.Minute})
		require.NoError(t, err)
		require.Equal(t, driver.StateClaimed, r.State)
		first := r.Fence
		require.NoError(t, ahead.Release(ctx, "f", tok))
		r, err = behind.Claim(ctx, driver.ClaimRequest{Key: "f", Token: driver.NewToken(), Lease: time.Minute})
		require.NoError(t, err)
		require.Equal(t, driver.StateClaimed, r.State)
		require.Greater(t, r.Fence, first, "the claim behind follows the fence kept in the item")
	}
}
