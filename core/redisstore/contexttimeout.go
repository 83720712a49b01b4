package redisstore

import (
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
)

// contextTimeouts reports whether client's calls end with their context
// (go-redis's ContextTimeoutEnabled), and the read timeout they wait out
// instead when they do not (0: no end). ok is false for a client whose
// options it cannot read: a UniversalClient of another type.
func contextTimeouts(client redis.UniversalClient) (enabled bool, readTimeout time.Duration, ok bool) {
	switch c := client.(type) {
	case *redis.Client: // single-node and failover (Sentinel) clients
		o := c.Options()
		return o.ContextTimeoutEnabled, max(o.ReadTimeout, 0), true
	case *redis.ClusterClient: // Cluster and failover Cluster clients
		o := c.Options()
		return o.ContextTimeoutEnabled, max(o.ReadTimeout, 0), true
	case *redis.Ring:
		// A Ring keeps its options as given; its shards' clients apply
		// go-redis's default (5s) to a zero ReadTimeout.
		o := c.Options()
		rt := o.ReadTimeout
		switch {
		case rt == 0:
			rt = 5 * time.Second
		case rt < 0:
			rt = 0
		}
		return o.ContextTimeoutEnabled, rt, true
	}
	return false, 0, false
}

// warnContextTimeouts logs at Warn when client's calls outlast their
// context: the caller's deadline then bounds no call to a server that does
// not answer.
func warnContextTimeouts(logger *slog.Logger, client redis.UniversalClient) {
	enabled, rt, ok := contextTimeouts(client)
	if !ok || enabled {
		return
	}
	waits := "it waits for the client's ReadTimeout (" + rt.String() + ") instead"
	if rt == 0 {
		waits = "it waits without end (the client's ReadTimeout is off)"
	}
	logger.Warn("jobonce: redisstore: the Redis client was made without ContextTimeoutEnabled: a call to a server that does not answer "+
		"outlasts its context: "+waits+"; set ContextTimeoutEnabled: true in the client's options",
		"option", "ContextTimeoutEnabled", "read_timeout", rt)
}
