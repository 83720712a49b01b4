package pgstore_test

import (
	"testing"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/storetest"
	"github.com/jobonce/jobonce/internal/testenv"
)

// TestConformance runs the store conformance suite. Its cases share one
// schema and table (each case uses keys of its own), so the suite does not
// open a pool per case.
func TestConformance(t *testing.T) {
	testenv.Short(t)
	pool, schema := testenv.Postgres(t)
	migratedStore(t, pool, nil)
	s := migratedStore(t, bigPool(t, schema, 16), nil)
	storetest.Run(t, func(*testing.T) core.Store { return s })
}
