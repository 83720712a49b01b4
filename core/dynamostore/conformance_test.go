package dynamostore_test

import (
	"testing"
	"time"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/dynamostore"
	"github.com/jobonce/jobonce/core/storetest"
	"github.com/jobonce/jobonce/internal/testenv"
)

// TestConformance runs the store conformance suite on one table per
// server, with a clock-skew margin of 20ms (the suite's leases are short).
func TestConformance(t *testing.T) {
	testenv.Short(t)
	for _, srv := range servers(t) {
		t.Run(srv.name, func(t *testing.T) {
			s := newStore(t, srv, &dynamostore.Config{ClockSkew: 20 * time.Millisecond})
			storetest.Run(t, func(*testing.T) driver.Store { return s })
		})
	}
}
