package core_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/memstore"
)

func TestNewRefusesANegativeMaxResultSize(t *testing.T) {
	_, err := core.New(memstore.New(), &core.Config{MaxResultSize: -1})
	require.ErrorContains(t, err, "Config.MaxResultSize must not be negative, got -1")
}

// A nil store of a concrete type (what a constructor returns beside its
// error) is refused at New with the type, not met as a panic in every call.
func TestNewRefusesATypedNilStore(t *testing.T) {
	var s *memstore.Store
	_, err := core.New(s, nil)
	require.ErrorContains(t, err, "jobonce: core: New: store is a nil *memstore.Store")
}

// Every bad Config field gets an error of its own that names the package and
// the field, and the value given.
func TestNewNamesThePackageAndTheBadField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg   core.Config
		field string
		got   string
	}{
		{core.Config{Lease: -time.Second}, "Lease", "got -1s"},
		{core.Config{Lease: time.Millisecond}, "Lease", "got 1ms"},
		{core.Config{Retention: -time.Second}, "Retention", "got -1s"},
		{core.Config{Lease: time.Hour, Retention: time.Minute}, "Retention", "got 1m0s"},
		{core.Config{MinRetryAfter: -time.Second}, "MinRetryAfter", "got -1s"},
		{core.Config{MaxRetryAfter: -time.Second}, "MaxRetryAfter", "got -1s"},
		{core.Config{MinRetryAfter: time.Minute, MaxRetryAfter: time.Second}, "MaxRetryAfter", "got 1s"},
		{core.Config{StoreTimeout: -time.Second}, "StoreTimeout", "got -1s"},
		{core.Config{MaxResultSize: -1}, "MaxResultSize", "got -1"},
	} {
		_, err := core.New(memstore.New(), &tc.cfg)
		require.ErrorContains(t, err, "jobonce: core: Config."+tc.field+" must ", "%+v", tc.cfg)
		require.ErrorContains(t, err, tc.got)
	}
	_, err := core.New(nil, nil)
	require.ErrorContains(t, err, "jobonce: core: New: store is nil")
	_, err = core.NewTxGuard[struct{}](nil)
	require.ErrorContains(t, err, "jobonce: core: NewTxGuard: Guard is nil")
}

// TestBadCallsAreNamedInErrors: a nil job function, a nil or foreign Claim
// and a Claim worked twice are Rejected with an error naming the package
// and the function called.
func TestBadCallsAreNamedInErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g, err := core.New(&fakeTxStore{Store: memstore.New()}, &core.Config{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	txg, err := core.NewTxGuard[*fakeTx](g)
	require.NoError(t, err)
	nop := func(context.Context) ([]byte, error) { return nil, nil }
	claim := g.Claim(ctx, core.Job{Key: "claimed"})[0]
	for _, tc := range []struct {
		call func() (core.Outcome, error)
		want string
	}{
		{func() (core.Outcome, error) { return g.Do(ctx, "k", nil) }, "jobonce: core: Guard.Do: job function is nil"},
		{func() (core.Outcome, error) { res, err := g.Run(ctx, core.Job{Key: "k"}, nil); return res.Outcome, err },
			"jobonce: core: Guard.Run: job function is nil"},
		{func() (core.Outcome, error) { res, err := (*core.Claim)(nil).Work(ctx, nop); return res.Outcome, err },
			"jobonce: core: Claim.Work: the Claim is nil"},
		{func() (core.Outcome, error) { res, err := (&core.Claim{}).Work(ctx, nop); return res.Outcome, err },
			"jobonce: core: Claim.Work: the Claim does not come from Guard.Claim"},
		{func() (core.Outcome, error) { res, err := claim.Work(ctx, nil); return res.Outcome, err },
			"jobonce: core: Claim.Work: job function is nil"},
		{func() (core.Outcome, error) { res, err := claim.Work(ctx, nop); return res.Outcome, err },
			"jobonce: core: Claim.Work: the claim was used by Work already"},
		{func() (core.Outcome, error) { return txg.Do(ctx, "k", nil) }, "jobonce: core: TxGuard.Do: job function is nil"},
		{func() (core.Outcome, error) { return txg.Run(ctx, core.Job{Key: "k"}, nil) }, "jobonce: core: TxGuard.Run: job function is nil"},
	} {
		out, err := tc.call()
		require.EqualError(t, err, tc.want)
		require.Equal(t, core.Rejected, out, tc.want)
	}
}

// limitedStore is a store whose done markers hold results of at most 1000
// bytes (driver.ResultLimiter).
type limitedStore struct{ driver.Store }

func (limitedStore) MaxResultSize() int { return 1000 }

// TestMaxResultSizeWithinTheStoresLimit: New refuses a MaxResultSize larger
// than the store's done markers hold, naming both, and lowers the default
// to it.
func TestMaxResultSizeWithinTheStoresLimit(t *testing.T) {
	s := limitedStore{memstore.New()}
	_, err := core.New(s, &core.Config{MaxResultSize: 1001})
	require.ErrorContains(t, err, "Config.MaxResultSize 1001 is larger than the 1000 bytes")
	for _, cfg := range []*core.Config{nil, {}, {MaxResultSize: 1000}} {
		g, err := core.New(s, cfg)
		require.NoError(t, err)
		require.Equal(t, 1000, g.MaxResultSize())
		require.NoError(t, g.Close())
	}
}
