// Package redisstore keeps jobonce claims and done markers in Redis.
//
//	import "github.com/jobonce/jobonce/core/redisstore"
//
// # Operations
//
// Every operation is one round trip: one embedded Lua script each for claim,
// extend, complete and release, each touching a single key, so the store
// works on a single node, behind Sentinel and on Redis Cluster. ClaimBatch and
// CompleteBatch pipeline many scripts in one round trip.
//
// # Records
//
// A key holds one small string: a running claim ("R", the 16-byte token, the
// payload fingerprint) whose TTL is the lease, or a done marker ("D", the
// fingerprint, the stored result) whose TTL is the retention. Expiry is
// Redis's own, so a crashed worker's claim disappears when its lease ends.
//
// # Eviction
//
// A done marker that Redis evicts lets a duplicate run. New reads the
// server's maxmemory-policy and warns under allkeys-*; use noeviction, or a
// volatile-* policy on a Redis that holds other keys without TTLs.
package redisstore
