package storetest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobonce/jobonce/core/driver"
)

// probe wraps a store and counts what a Guard does while a copy waits for
// its running copy. On a store that notifies, it counts Await calls (a
// waiting copy's reads of its key), Listeners opened and still open; with
// drop set, its Listeners drop every notification but the one that says
// listening began (a lost signal); with failAwait, Await fails as an
// unreachable store does. On a store that does not notify, the waiting copy
// polls with Claim: awaits counts the claims of a key the probe has already
// seen running (the polls), failAwait fails those, and no Listener opens.
// The Guard under test gets p.store().
type probe struct {
	driver.Notifier // nil when the store does not notify
	poll            *pollStore
	awaits          atomic.Int64
	listens         atomic.Int64
	open            atomic.Int64
	drop            atomic.Bool
	failAwait       atomic.Bool
}

func newProbe(t *testing.T, s driver.Store) *probe {
	t.Helper()
	if n, ok := s.(driver.Notifier); ok {
		return &probe{Notifier: n}
	}
	p := &probe{}
	p.poll = &pollStore{Store: s, p: p, running: make(map[string]bool)}
	return p
}

// store returns the store for the Guard under test.
func (p *probe) store() driver.Store {
	if p.poll != nil {
		return p.poll
	}
	return p
}

// listeners returns how many Listeners a Guard opens for waiting copies:
// one on a store that notifies, none on one that does not.
func (p *probe) listeners() int64 {
	if p.poll != nil {
		return 0
	}
	return 1
}

// settleBound returns the bound, after the running copy ended at end, by
// which a copy that began waiting at start settles: on a store that
// notifies, before its first check without a signal; on one that does not,
// by its next poll, which comes at most as long after the last as the
// polls before it took together.
func (p *probe) settleBound(start, end time.Time) time.Duration {
	if p.poll != nil {
		return end.Sub(start) + signalled
	}
	return signalled
}

// pollStore is the store a Guard gets from a probe of a store that does
// not notify: it counts, and fails on request, the polls of waiting copies.
type pollStore struct {
	driver.Store
	p       *probe
	mu      sync.Mutex
	running map[string]bool // keys a claim found running
}

func (s *pollStore) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimReply, error) {
	s.mu.Lock()
	again := s.running[req.Key]
	s.mu.Unlock()
	if again {
		s.p.awaits.Add(1)
		if s.p.failAwait.Load() {
			return driver.ClaimReply{}, errInjected
		}
	}
	r, err := s.Store.Claim(ctx, req)
	if err == nil && r.State == driver.StateRunning {
		s.mu.Lock()
		s.running[req.Key] = true
		s.mu.Unlock()
	}
	return r, err
}

func (p *probe) Await(ctx context.Context, req driver.ClaimRequest) (driver.ClaimReply, error) {
	p.awaits.Add(1)
	if p.failAwait.Load() {
		return driver.ClaimReply{}, errInjected
	}
	return p.Notifier.Await(ctx, req)
}

func (p *probe) Listen(ctx context.Context, notify func(string)) (driver.Listener, error) {
	p.listens.Add(1)
	l := &probeListener{p: p, notify: notify}
	inner, err := p.Notifier.Listen(ctx, l.pass)
	if err != nil {
		return nil, err
	}
	l.Listener = inner
	p.open.Add(1)
	return l, nil
}

type probeListener struct {
	driver.Listener
	p      *probe
	notify func(string)
	once   sync.Once
}

// pass hands a notification on, unless the probe drops them.
func (l *probeListener) pass(key string) {
	if !l.p.drop.Load() {
		l.notify(key)
	}
}

func (l *probeListener) Add(ctx context.Context, key string) error {
	err := l.Listener.Add(ctx, key)
	if err == nil && l.p.drop.Load() {
		l.notify(key) // listening began; what follows is lost
	}
	return err
}

func (l *probeListener) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() { l.p.open.Add(-1) })
	return err
}
