package core_test

import (
	"testing"

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
	require.ErrorContains(t, err, "jobonce: store is a nil *memstore.Store")
}
