package redisstore_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// warns returns the Warn records among r's, with their attributes by key.
func (r *records) warns() []map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]string
	for _, rec := range r.msgs {
		if rec.Level < slog.LevelWarn {
			continue
		}
		attrs := map[string]string{"msg": rec.Message}
		rec.Attrs(func(a slog.Attr) bool {
			attrs[a.Key] = a.Value.String()
			return true
		})
		out = append(out, attrs)
	}
	return out
}

// universal is a UniversalClient whose options New cannot read.
type universal struct{ redis.UniversalClient }

// New warns, once, about every client it can inspect that was made without
// ContextTimeoutEnabled (its calls to a server that does not answer wait for
// ReadTimeout, not their context), naming the option and the wait; it says
// nothing of a client made with it, or of a client it cannot inspect.
func TestNewWarnsOfAClientWithoutContextTimeouts(t *testing.T) {
	t.Parallel()
	addr := testenv.ClosedAddr(t) // New reads nothing: SkipEvictionCheck
	sentinel := []string{addr}
	for _, tc := range []struct {
		name   string
		client func(on bool) redis.UniversalClient
		wait   string // the read timeout named, "" for no warning
	}{
		{"Client", func(on bool) redis.UniversalClient {
			return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: on})
		}, "5s"},
		{"ClientWithReadTimeout", func(on bool) redis.UniversalClient {
			return redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 2 * time.Second, ContextTimeoutEnabled: on})
		}, "2s"},
		{"ClientWithoutReadTimeout", func(on bool) redis.UniversalClient {
			return redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: -1, ContextTimeoutEnabled: on})
		}, "0s"},
		{"ClusterClient", func(on bool) redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, ContextTimeoutEnabled: on})
		}, "5s"},
		{"Ring", func(on bool) redis.UniversalClient {
			return redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr}, ContextTimeoutEnabled: on})
		}, "5s"},
		{"FailoverClient", func(on bool) redis.UniversalClient {
			return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: sentinel, ContextTimeoutEnabled: on})
		}, "5s"},
		{"FailoverClusterClient", func(on bool) redis.UniversalClient {
			return redis.NewFailoverClusterClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: sentinel, ContextTimeoutEnabled: on})
		}, "5s"},
		{"UniversalClient", func(on bool) redis.UniversalClient {
			return universal{redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: on})}
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, on := range []bool{false, true} {
				client := tc.client(on)
				t.Cleanup(func() { _ = client.Close() })
				var logs records
				_, err := redisstore.New(client, &redisstore.Config{Logger: slog.New(&logs), SkipEvictionCheck: true})
				require.NoError(t, err)
				if on || tc.wait == "" {
					require.Empty(t, logs.warns(), "ContextTimeoutEnabled %t", on)
					continue
				}
				warns := logs.warns()
				require.Len(t, warns, 1)
				require.Equal(t, "ContextTimeoutEnabled", warns[0]["option"])
				require.Equal(t, tc.wait, warns[0]["read_timeout"])
				require.Contains(t, warns[0]["msg"], "jobonce: redisstore: the Redis client was made without ContextTimeoutEnabled")
				require.Contains(t, warns[0]["msg"], "set ContextTimeoutEnabled: true")
			}
		})
	}
}
