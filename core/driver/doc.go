// Package driver is the contract between a core.Guard and the store that
// keeps its claims and done markers. It serves people who write a store;
// users of jobonce pass a store (redisstore, pgstore, memstore) to core.New
// and need nothing from here.
//
// A store implements Store: four atomic operations on one key. A store that
// can handle many keys in one round trip implements BatchStore as well, and
// the Guard then groups concurrent calls into shared round trips. A store
// that can record a key inside the caller's database transaction implements
// TxStore for its transaction type, which core.NewTxGuard turns into the
// transactional (exactly-once) mode. A store that can tell whether it can be
// used now implements ReadyStore, for core.Guard.Ready.
//
// The Guard decides every outcome: a store reports what it found (claimed,
// running, done, with the stored fingerprint and result), or an error, and
// never decides whether a job runs. core/storetest holds the conformance
// suite every store must pass.
package driver
