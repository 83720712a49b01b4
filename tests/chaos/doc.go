// Package chaos is jobonce's chaos harness: Run drives jobs through a
// Guard on a store whose calls fail, hang, panic and answer late, and
// judges the recorded history against the run-once semantics.
//
//	func TestChaos(t *testing.T) {
//		chaos.Run(t, chaos.Options{Store: mystore.New(...)})
//	}
//
// This package's tests run it on each of jobonce's stores, through a proxy
// the tests cut now and then. It lives in the tests module, outside the
// library, with the crash experiments; a store's conformance suite is
// core/storetest.
package chaos
