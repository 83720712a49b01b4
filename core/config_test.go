package core_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
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
