package dynamostore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/dynamostore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// TestStatesReadBack: a claim or done marker whose condition fails reports
// the key's state as the failed write read it back (moto returns the item
// with the failure; dynalite does not, and the Store reads it), one call
// after another on every server.
func TestStatesReadBack(t *testing.T) {
	testenv.Short(t)
	for _, srv := range servers(t) {
		t.Run(srv.name, func(t *testing.T) {
			ctx := ctxT(t)
			s := newStore(t, srv, &dynamostore.Config{ClockSkew: 20 * time.Millisecond})
			first, second := driver.NewToken(), driver.NewToken()
			r, err := s.Claim(ctx, driver.ClaimRequest{Key: "k", Token: first, Fingerprint: "fp", Lease: time.Minute})
			require.NoError(t, err)
			require.Equal(t, driver.StateClaimed, r.State)
			fence := r.Fence

			r, err = s.Claim(ctx, driver.ClaimRequest{Key: "k", Token: first, Lease: time.Minute})
			require.NoError(t, err)
			require.Equal(t, driver.ClaimReply{State: driver.StateClaimed, Fence: fence}, r, "the same claim sent again")

			r, err = s.Claim(ctx, driver.ClaimRequest{Key: "k", Token: second, Lease: time.Minute})
			require.NoError(t, err)
			require.Equal(t, driver.StateRunning, r.State)
			require.Equal(t, "fp", r.Fingerprint)
			require.Equal(t, fence, r.Fence)
			require.InDelta(t, time.Minute, r.Remaining, float64(10*time.Second))

			require.ErrorIs(t, s.Complete(ctx, driver.CompleteRequest{Key: "k", Token: second, Retention: time.Minute}), driver.ErrLeaseLost)
			done := driver.CompleteRequest{Key: "k", Token: first, Fingerprint: "fp", Result: []byte("result"), Retention: time.Hour}
			require.NoError(t, s.Complete(ctx, done))
			require.NoError(t, s.Complete(ctx, done), "the done marker sent again by its writer")
			require.ErrorIs(t, s.Complete(ctx, driver.CompleteRequest{Key: "k", Token: second, Retention: time.Minute}), driver.ErrLeaseLost)

			r, err = s.Claim(ctx, driver.ClaimRequest{Key: "k", Token: second, Lease: time.Minute})
			require.NoError(t, err)
			require.Equal(t, driver.StateDone, r.State)
			require.Equal(t, []byte("result"), r.Result)
			require.Equal(t, "fp", r.Fingerprint)
			require.InDelta(t, time.Hour, r.Remaining, float64(10*time.Second))

			r, err = s.Claim(ctx, driver.ClaimRequest{Key: "released", Token: first, Lease: time.Minute})
			require.NoError(t, err)
			require.NoError(t, s.Release(ctx, "released", first))
			require.ErrorIs(t, s.Release(ctx, "released", first), driver.ErrLeaseLost)
			next, err := s.Claim(ctx, driver.ClaimRequest{Key: "released", Token: second, Lease: time.Minute})
			require.NoError(t, err)
			require.Equal(t, driver.StateClaimed, next.State)
			require.Greater(t, next.Fence, r.Fence)
		})
	}
}

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
