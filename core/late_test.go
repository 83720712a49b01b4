package core_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// lateClaims answers every claim late (after delay), and ends the caller's
// context (cancel) when a claim is released, counting the releases.
type lateClaims struct {
	*memstore.Store
	delay    time.Duration
	cancel   context.CancelFunc
	releases atomic.Int32
}

func (s *lateClaims) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimReply, error) {
	r, err := s.Store.Claim(ctx, req)
	time.Sleep(s.delay) // the late answer itself, not a synchronisation
	return r, err
}

func (s *lateClaims) Release(ctx context.Context, key string, token driver.Token) error {
	s.releases.Add(1)
	s.cancel()
	return s.Store.Release(ctx, key, token)
}

// TestClaimAnsweredLateIsReleasedOnce: a claim answered past half its lease
// runs nothing and is released; when the caller's context ends during that
// release, the outcome is Canceled, and the claim is released once, not
// again as a cancelled claim.
func TestClaimAnsweredLateIsReleasedOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &lateClaims{Store: memstore.New(), delay: 60 * time.Millisecond, cancel: cancel}
	g := testenv.NewGuard(t, s, &core.Config{Lease: 100 * time.Millisecond})
	out, err := g.Do(ctx, "late", func(context.Context) error {
		t.Error("a claim answered past half its lease ran its job")
		return nil
	})
	require.Equal(t, core.Canceled, out)
	require.ErrorIs(t, err, context.Canceled)
	require.EqualValues(t, 1, s.releases.Load(), "releases of the late claim")
}
