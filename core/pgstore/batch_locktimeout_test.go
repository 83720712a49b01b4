package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/pgstore"
)

// A mixed Batch in which a claim's statement fails on its lock wait (the
// key is held by a transaction that does not commit) after, or before, a
// done marker's statement in the same implicit transaction: the failure
// rolls the marker back with it, so the marker must be sent again and
// reported from that second write. It must be durable when reported nil,
// and the call must stay within its context.
func TestMixedBatchRewritesAMarkerRolledBackByALockTimeout(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, pool := newStore(t, &pgstore.Config{LockTimeout: 2 * time.Second})
	mode := txOf(t, s)
	holder, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer holder.Rollback(ctx)
	for _, c := range []struct{ marker, held string }{
		{"a-marker", "z-held"}, // the marker's statement runs first, then the claim fails
		{"z-marker", "a-held"}, // the claim fails first: the marker's statement never runs
	} {
		held, err := mode.StoredKey(c.held)
		require.NoError(t, err)
		mode.Record(t, ctx, holder, c.held)

		claim := claimReq(c.marker, time.Minute)
		r, err := s.Claim(ctx, claim)
		require.NoError(t, err)
		require.Equal(t, driver.StateClaimed, r.State)

		bctx, cancel := context.WithTimeout(ctx, time.Second) // well under LockTimeout
		start := time.Now()
		replies, claimErrs, completeErrs := s.Batch(bctx,
			[]driver.CompleteRequest{{Key: c.marker, Token: claim.Token, Result: []byte("r"), Retention: time.Hour}},
			[]driver.ClaimRequest{claimReq(held, time.Minute), claimReq(c.marker+"-free", time.Minute)})
		took := time.Since(start)
		cancel()
		require.Less(t, took, time.Second, "within its context")
		require.NoError(t, completeErrs[0], "%s: the marker was written", c.marker)
		require.NoError(t, claimErrs[0])
		require.Equal(t, driver.StateRunning, replies[0].State, "the held key is running")
		require.NoError(t, claimErrs[1])
		require.Equal(t, driver.StateClaimed, replies[1].State, "the free key is claimed")

		again, err := s.Claim(ctx, claimReq(c.marker, time.Minute))
		require.NoError(t, err)
		require.Equal(t, driver.StateDone, again.State, "%s: the marker reported written is durable", c.marker)
		require.Equal(t, []byte("r"), again.Result)
		t.Logf("%s with %s: answered in %s", c.marker, c.held, took.Round(time.Millisecond))
	}
}
