package testenv

import (
	"log/slog"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/core/redisstore"
)

// Quiet is a logger that discards every record.
var Quiet = slog.New(slog.DiscardHandler)

// NewGuard returns a Guard on store with a copy of cfg (nil for the
// defaults), failing the test when core.New does. The Guard's log records
// are discarded unless cfg.Logger is set: tests read outcomes through an
// Observer, and many provoke warnings on purpose.
func NewGuard(t testing.TB, store driver.Store, cfg *core.Config) *core.Guard {
	t.Helper()
	var c core.Config
	if cfg != nil {
		c = *cfg
	}
	if c.Logger == nil {
		c.Logger = Quiet
	}
	g, err := core.New(store, &c)
	if err != nil {
		t.Fatalf("core.New: %v", err)
	}
	t.Cleanup(func() { _ = g.Close() }) // its completion signal's connection, if any
	return g
}

// MemGuard returns a Guard on a new memstore, as NewGuard.
func MemGuard(t testing.TB, cfg *core.Config) *core.Guard {
	t.Helper()
	return NewGuard(t, memstore.New(), cfg)
}

// RedisGuard returns a Guard on a redisstore over the test Redis, under a
// key prefix of the test's own (Prefix) whose keys are deleted at cleanup;
// cfg.KeyPrefix is ignored. Otherwise as NewGuard.
func RedisGuard(t testing.TB, cfg *core.Config) *core.Guard {
	t.Helper()
	prefix := Prefix(t)
	return RedisGuardOn(t, Redis(t, prefix), prefix, cfg)
}

// RedisGuardOn returns a Guard on a redisstore over rdb under prefix, which
// replaces cfg.KeyPrefix: for tests that share one prefix between several
// Guards, or with their own view of the keys. Otherwise as NewGuard.
func RedisGuardOn(t testing.TB, rdb redis.UniversalClient, prefix string, cfg *core.Config) *core.Guard {
	t.Helper()
	store, err := redisstore.New(rdb, nil)
	if err != nil {
		t.Fatalf("redisstore: %v", err)
	}
	return NewGuard(t, store, withPrefix(cfg, prefix))
}

// HangingGuard returns a Guard on a HangingStore over the test Redis (hanging
// from the start), under a key prefix of the test's own whose keys are
// deleted at cleanup, and the store; cfg.KeyPrefix is ignored. Otherwise as
// NewGuard.
func HangingGuard(t testing.TB, cfg *core.Config) (*core.Guard, *HangingStore) {
	t.Helper()
	prefix := Prefix(t)
	store := HangingRedis(t, Redis(t, prefix))
	return NewGuard(t, store, withPrefix(cfg, prefix)), store
}

// withPrefix returns a copy of cfg (nil for the defaults) with KeyPrefix set.
func withPrefix(cfg *core.Config, prefix string) *core.Config {
	var c core.Config
	if cfg != nil {
		c = *cfg
	}
	c.KeyPrefix = prefix
	return &c
}
