// Package redisstore keeps jobonce claims and done markers in Redis: a
// single node, Sentinel or Redis Cluster.
//
//	import "github.com/jobonce/jobonce/core/redisstore"
//
// # Getting started
//
// Make the go-redis client with ContextTimeoutEnabled, so that its calls
// end with their context. Set Config.Strict in production:
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
//	store, err := redisstore.New(rdb, &redisstore.Config{Strict: true})
//	if err != nil {
//		return err // unreachable, or a setting that can lose done markers
//	}
//	guard, err := core.New(store, nil)
//
// Each operation is one Lua script on a single key, and Batch pipelines
// many of them in one round trip. Expiry is Redis's own, so a crashed
// worker's claim disappears when its lease ends.
//
// # Losing done markers
//
// A done marker that Redis loses lets a duplicate run. Eviction, a restart
// without persistence and a failover lose them. New warns of the first two,
// and Config.Strict refuses them. Config.WaitReplicas closes the failover
// gap when the promoted replica is one that acknowledged, and
// Config.WaitAOF the restart's.
//
// docs/operations.md explains running Redis for jobonce: the checks,
// failover, detection at run time, the completion signal, and how the store
// keeps its keys.
package redisstore
