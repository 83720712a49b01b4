package storetest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core/driver"
)

// probe wraps a store that notifies and counts what a Guard does with its
// completion signal: Await calls, Listeners opened and still open. With
// drop set, its Listeners drop every notification but the one that says
// listening began (a lost signal); with failAwait, Await fails as an
// unreachable store does.
type probe struct {
	driver.Notifier
	awaits    atomic.Int64
	listens   atomic.Int64
	open      atomic.Int64
	drop      atomic.Bool
	failAwait atomic.Bool
}

func newProbe(t *testing.T, s driver.Store) *probe {
	t.Helper()
	n, ok := s.(driver.Notifier)
	require.True(t, ok, "%T does not implement driver.Notifier", s)
	return &probe{Notifier: n}
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
