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
