// Package driver is the contract between a core.Guard and the store that
// keeps its claims and done markers. It is for people who write a store.
// Users of jobonce pass a store (redisstore, pgstore, memstore) to core.New
// and need nothing from here.
//
//	import "github.com/jobonce/jobonce/core/driver"
//
// A store implements Store: four atomic operations on one key. It may also
// implement BatchStore (many keys in one round trip), TxStore (keys
// recorded in the caller's transaction), Notifier (the completion signal)
// and ReadyStore (a health check).
//
// The Guard decides every outcome. A store reports what it found, or an
// error; it never decides whether a job runs. Every store must pass the
// conformance suite in core/storetest. docs/stores.md ("Writing a store")
// gives the reasons for the contract's rules.
package driver
