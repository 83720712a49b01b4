package memstore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/core/storetest"
	"github.com/jobonce/jobonce/internal/testenv"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) driver.Store { return memstore.New() })
}

// loseOneAnswer writes the first done marker and loses its answer, as a
// network would after the write.
type loseOneAnswer struct {
	driver.Store
	completes int
}

func (l *loseOneAnswer) Complete(ctx context.Context, req driver.CompleteRequest) error {
	err := l.Store.Complete(ctx, req)
	if l.completes++; l.completes == 1 && err == nil {
		return errors.New("read tcp: i/o timeout")
	}
	return err
}

// A done marker whose answer was lost is sent again and finds the marker its
// own claim wrote: the job reports Ran, with no warning, and its redelivery
// is a Duplicate with the stored result.
func TestCompleteSentAgainAfterItsAnswerWasLostIsRan(t *testing.T) {
	store := &loseOneAnswer{Store: memstore.New()}
	var warned testenv.Warnings
	g, err := core.New(store, &core.Config{Logger: warned.Logger()})
	require.NoError(t, err)
	ctx := context.Background()
	res, err := g.Run(ctx, core.Job{Key: "job"}, func(context.Context) ([]byte, error) { return []byte("r"), nil })
	require.NoError(t, err)
	require.Equal(t, core.Ran, res.Outcome)
	require.Equal(t, 2, store.completes, "the marker was sent again")
	require.Empty(t, warned.Messages())

	res, err = g.Run(ctx, core.Job{Key: "job"}, func(context.Context) ([]byte, error) { return nil, errors.New("must not run") })
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, res.Outcome)
	require.Equal(t, []byte("r"), res.Value)
}

// Every bad request field gets an error that names the package and the
// field, and the value given.
func TestBadRequestFieldsNameThePackageAndTheField(t *testing.T) {
	t.Parallel()
	s, ctx := memstore.New(), context.Background()
	for _, tc := range []struct {
		call func() error
		want string
	}{
		{func() error {
			_, err := s.Claim(ctx, driver.ClaimRequest{Key: "k", Token: driver.NewToken(), Lease: time.Microsecond})
			return err
		}, "jobonce: memstore: ClaimRequest.Lease must be at least 1ms, got 1µs"},
		{func() error { return s.Extend(ctx, "k", driver.NewToken(), -time.Second) }, "jobonce: memstore: Extend lease must be at least 1ms, got -1s"},
		{func() error {
			return s.Complete(ctx, driver.CompleteRequest{Key: "k", Token: driver.NewToken()})
		}, "jobonce: memstore: CompleteRequest.Retention must be at least 1ms, got 0s"},
	} {
		require.EqualError(t, tc.call(), tc.want)
	}
}

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
