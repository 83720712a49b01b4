package dynamostore_test

import (
	"testing"
	"time"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/dynamostore"
	"github.com/jobonce/jobonce/core/storetest"
	"github.com/jobonce/jobonce/internal/testenv"
)

// TestConformance runs the store conformance suite on dynalite, with a
// clock-skew margin of 20ms (the suite's leases are short). It does not run
// on moto_server: moto evaluates a conditional UpdateItem and applies it
// without holding off concurrent ones (of 120 rounds of 32 racing
// UpdateItems conditioned on the item's absence or expiry, 124 writes
// succeeded), so the suite's races fail there whatever the store does;
// TestConformanceOnMotoSerial runs it on moto serving one request at a time.
func TestConformance(t *testing.T) {
	testenv.Short(t)
	s := newStore(t, dynalite(t), &dynamostore.Config{ClockSkew: 20 * time.Millisecond})
	storetest.Run(t, func(*testing.T) driver.Store { return s })
}

// TestConformanceOnMotoSerial runs the conformance suite on moto serving
// one request at a time (TEST_MOTO_SERIAL_ENDPOINT), a second DynamoDB
// implementation whose writes are atomic.
func TestConformanceOnMotoSerial(t *testing.T) {
	testenv.Short(t)
	s := newStore(t, motoSerial(t), &dynamostore.Config{ClockSkew: 20 * time.Millisecond})
	storetest.Run(t, func(*testing.T) driver.Store { return s })
}
