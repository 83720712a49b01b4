// Package storetest is the conformance suite every driver.Store must pass.
//
//	import "github.com/jobonce/jobonce/core/storetest"
//
// Run it from a store's tests with a function that returns a fresh store:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) driver.Store { return mystore.New(...) })
//	}
//
// The suite covers the Store contract and the Guard's behaviour on top of
// the store. The contract cases are claims, races, expiry takeovers, token
// safety, extend, complete, release, retention, fingerprints, results,
// batches, fences and bad input. The Ready cases run for a
// driver.ReadyStore, and the Notifier cases for a driver.Notifier. Beyond
// what driver.Store's documentation says, the suite holds every store to
// these rules:
//
//   - keys, fingerprints and results are byte strings of any length (a store
//     may refuse a key too long for it, with an error saying so); a result
//     stored as nil comes back nil, an empty one empty;
//   - a lease, extension or retention under 1ms is an error naming the field,
//     and the longest time.Duration works;
//   - a claim sent again with the token that holds the key reports claimed,
//     with the fence it got the first time;
//   - a complete sent again by the claim whose done marker holds the key
//     answers nil, and one by any other claim ErrLeaseLost;
//   - a key's successive claims get strictly increasing fences, after a
//     release, a lapsed lease or an expired done marker alike;
//   - a claim that finds a done marker reports its remaining retention;
//   - a call with a done context fails with an error wrapping the context's
//     error and changes nothing; a batch call answers every request so.
//
// The chaos harness, which runs jobs through a Guard on a store whose
// calls fail, hang and answer late, is package chaos of the tests module
// (github.com/jobonce/jobonce/tests/chaos).
//
// Keys are random per run. Every lease or retention the suite writes is at
// most a minute, except in the longest-duration case. The store's own
// cleanup must remove that case's done marker.
package storetest
