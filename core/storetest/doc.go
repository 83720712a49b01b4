// Package storetest is the conformance suite every core.Store must pass.
// Run it from a store's tests with a function that returns a fresh store:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) core.Store { return mystore.New(...) })
//	}
//
// The suite covers the Store contract (claim, race, expiry takeover, token
// safety, extend, complete, release, retention, fingerprints, results, batch
// operations, bad input) and the Guard's behaviour on top of the store. Keys
// are random per run and every lease or retention it writes is at most a
// minute, so it leaves nothing behind for long.
//
//	import "github.com/jobonce/jobonce/core/storetest"
package storetest
