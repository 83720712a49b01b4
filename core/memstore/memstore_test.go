package memstore_test

import (
	"testing"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/core/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) core.Store { return memstore.New() })
}
