// Package redisstore keeps jobonce claims and done markers in Redis.
//
//	import "github.com/jobonce/jobonce/core/redisstore"
//
// A Store on a go-redis client whose calls end with their context:
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
//	store, err := redisstore.New(rdb, nil)
//
// Without ContextTimeoutEnabled, a call to a server that does not answer
// waits for the client's ReadTimeout (5s by default) whatever its context
// says: New warns of such a client (a *redis.Client, *redis.ClusterClient or
// *redis.Ring, failover clients included).
//
// # Operations
//
// Every operation is one round trip: one embedded Lua script each for claim,
// extend, complete and release, each touching a single key, so the store
// works on a single node, behind Sentinel and on Redis Cluster. Batch
// pipelines the scripts of many claims and done markers in one round trip.
//
// # Notifications
//
// Store is a driver.Notifier: Await, a claim that finds the key held by
// another token, sets the key's awaited mark (a key of its own in the
// key's hash slot, expiring with the running claim's lease: the key and
// "\x00awaited" after a hash tag the key has, else "{key}\x00awaited"), and the
// complete or release that ends the claim deletes the mark and publishes
// the key on a channel named after it (SPUBLISH on Cluster, so the message
// stays on the key's primary). A claim nobody awaits ends with no publish:
// the scripts only read the mark's absence. A Listener subscribes to the
// keys of a Guard's waiting copies on one connection per node (per primary
// on Cluster, per shard on a Ring), read by a goroutine
// of its own until Close, and notifies a key again when its subscription
// is confirmed anew after a reconnection. Values do not change: workers of
// the earlier release neither set nor read marks, which costs a copy that
// waits its signal, not its outcome. On Cluster, a key without a hash tag
// that holds a "}" has no mark (no tag names its slot) and is not notified,
// and while a slot migrates its scripts run without the mark (a node
// answers a script on two keys, one of them missing, TRYAGAIN).
//
// # Records
//
// A key holds one small string: a running claim ("F", the 16-byte token, the
// 8-byte fence, the payload fingerprint) whose TTL is the lease, or a done
// marker ("w" and 8 bytes of the writer's token, then "d", "D" or "L", the
// fingerprint and the stored result) whose TTL is the retention and which a
// claim reports as the marker's remaining retention. Markers without the
// writer's id are read too, and Config.LegacyMarkers writes them, for a
// rolling upgrade from a release that wrote no id.
// Fingerprints and results may be of any length and hold any bytes; a nil
// result comes back nil and an empty one empty. Every duplicate's claim reads
// the stored result whole, so a core.Guard stores results of up to
// core.Config.MaxResultSize (64 KiB by default) and writes the marker of a
// larger one without it. Expiry is Redis's own, so a
// crashed worker's claim disappears when its lease ends. Redis keeps TTLs in
// milliseconds: a lease or retention under 1ms is an error, and longer ones
// are rounded up to whole milliseconds.
//
// # Fences
//
// A claim's fence is the Redis server's clock (TIME) in microseconds since
// the Unix epoch, read in the claim script and kept with the claim, so a
// claim sent again with the same token gets the same fence back. A key that
// was released, or whose lease or retention ran out, is gone from Redis, and
// the next claim's fence comes from the clock alone: successive claims of a
// key get increasing fences as long as the clock of the server that answers
// (after a failover, the new primary's) does not step back by more than the
// time between them. Done markers keep no fence, so they cost no more memory
// for it.
//
// # Failures
//
// Every request of a batch gets its own reply or error; one the pipeline did
// not answer gets an error, never a nil error or a zero reply. A call whose
// context ends before Redis answers returns an error wrapping the context's
// error; Redis may still have run it. A claim sent again with the same token
// (go-redis retries a round trip whose reply was lost) finds the key held by
// that token and reports it claimed.
//
// # Eviction
//
// A done marker that Redis evicts lets a duplicate run. New reads the
// server's maxmemory-policy and warns under any policy but noeviction:
// volatile-* policies evict keys with a TTL, which every claim and done
// marker has. A server New cannot read (refused, or no answer within 2s,
// whatever the client's timeouts) gets a warning saying so and why, never
// silence, and the first claim reads it again, and after it a claim once a
// second until a read succeeds, each read adding 250ms at most to its
// claim. The jobonce command's check (cmd/jobonce) prints the eviction,
// persistence and replication risks of each server, and its inspect a
// stored key.
//
// Config.Strict, the setting for production, turns New's warnings into its
// error: a server it cannot read within its 2s, and one whose settings can
// lose done markers (an eviction policy but noeviction, neither AOF nor RDB
// snapshots), the error naming what to set. What a server does not report
// (a save setting behind a refused CONFIG GET) is not refused. Ready, which
// core.Guard.Ready calls for a health or readiness check, sends PING to
// every server the client writes to and, under Strict, reports a risk the
// latest check found.
//
// # Replication and failover
//
// Redis replicates asynchronously: a primary that dies before its replica
// got a claim or a done marker loses it at the failover, and a second copy
// then runs alongside, or again. Config.WaitReplicas makes a write count
// only once that many replicas acknowledged it (WAIT at the end of the
// writes' own pipeline; on a Cluster client, per primary). Unacknowledged,
// a claim is released and answered core.ErrUnreplicated (the job does not
// run, even under FailOpen), and a done marker is answered so too, also when
// the connection broke before WAIT answered (a failover closes it); the Guard sends it again until
// its StoreTimeout. A done marker names the claim that wrote it, so the
// request sent again finds its own marker (and writes it again, so that its
// acknowledgement is waited for anew), never another copy's. A claim that
// finds a done marker not acknowledged is answered core.ErrUnreplicated
// too, not as a duplicate: the copy is tried again later. Config.WaitAOF
// also waits for the append-only file, for a restart of the primary.
//
// Every Config.CheckEvery, within one claim, the Store reads its servers
// again (INFO and CONFIG GET) and logs once at Warn, and counts in
// jobonce.redis.events, each restart, failover, and risk of eviction or
// lost persistence it notices.
package redisstore
