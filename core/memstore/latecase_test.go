package memstore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/core/storetest"
)

// lateShortClaim answers the first claim with a 100ms lease (the lease of
// the conformance cases about lapsed leases) 60ms late, as a loaded machine
// may: past half the lease, so that claim fails closed and runs nothing.
type lateShortClaim struct {
	*memstore.Store
	once atomic.Bool
}

func (s *lateShortClaim) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimReply, error) {
	r, err := s.Store.Claim(ctx, req)
	if req.Lease == 100*time.Millisecond && s.once.CompareAndSwap(false, true) {
		time.Sleep(60 * time.Millisecond) // the late answer itself, not a synchronisation
	}
	return r, err
}

// TestConformanceWithALateClaimOfAShortLease: the conformance suite neither
// hangs nor fails when a store answers a claim of a short lease too late for
// its job to run; the case that met it tries again.
func TestConformanceWithALateClaimOfAShortLease(t *testing.T) {
	storetest.Run(t, func(t *testing.T) driver.Store { return &lateShortClaim{Store: memstore.New()} })
}
