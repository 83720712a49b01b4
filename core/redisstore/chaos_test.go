package redisstore_test

import (
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobonce/jobonce/core/storetest"
	"github.com/jobonce/jobonce/internal/testenv"
)

// TestChaos runs the randomized fault test through a proxy that the test
// cuts now and then, on top of the faults the Chaos store injects.
func TestChaos(t *testing.T) {
	prefix := testenv.Prefix(t)
	direct := testenv.Redis(t, prefix)
	target := direct.Options().Addr
	p := testenv.StartProxy(t, "127.0.0.1:0", target)
	addr := p.Addr()
	viaProxy := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond, PoolSize: 64})
	t.Cleanup(func() { _ = viaProxy.Close() })

	var mu sync.Mutex
	cut := false
	storetest.RunChaos(t, storetest.ChaosOptions{
		Store:     newStore(t, viaProxy),
		Verify:    newStore(t, direct),
		KeyPrefix: prefix,
		Duration:  750 * time.Millisecond,
		Cut: func() {
			mu.Lock()
			defer mu.Unlock()
			// Proxy.Cut can miss a connection accepted while it runs and
			// then wait for it forever; that connection ends when the
			// client closes, below.
			go p.Cut()
			cut = true
		},
		Restore: func() {
			mu.Lock()
			defer mu.Unlock()
			if cut {
				p = testenv.StartProxy(t, addr, target)
				cut = false
			}
		},
	})
	_ = viaProxy.Close()
}
