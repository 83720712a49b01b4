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
