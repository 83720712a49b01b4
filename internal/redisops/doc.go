// Package redisops holds the operator's diagnostics of a Redis server behind
// a redisstore.Store, for the jobonce command and redisstore's own watch:
// ServerInfo and its Risks (eviction, persistence, replication), read by
// ReadServerInfo, Inspect, which reads one stored key, and ChannelAllowed,
// which tells whether the user may use the completion signal's channels.
// They are not part of redisstore's API: a program using the store gets
// their findings from the Warn logs and metrics of redisstore.New and its
// periodic check.
package redisops
