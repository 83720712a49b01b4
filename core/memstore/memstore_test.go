package memstore_test

import (
	"testing"
	"time"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/core/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) driver.Store { return memstore.New() })
}

func TestChaos(t *testing.T) {
	storetest.RunChaos(t, storetest.ChaosOptions{Store: memstore.New(), Duration: time.Second})
}
