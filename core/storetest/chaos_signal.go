package storetest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jobonce/jobonce/core/driver"
)

// The Chaos store's completion signal: it notifies when the wrapped store
// does, and while stormy it loses notifications, delays them (up to the
// store timeout) and makes up spurious ones, for a key or for every key. A
// waiting copy must settle all the same, by its own deadline.

// signalFault is what a Chaos Listener does to one notification.
type signalFault uint8

const (
	signalPass signalFault = iota
	signalLost
	signalDelayed
	signalSpurious
	numSignalFaults
)

var signalFaultNames = [numSignalFaults]string{"pass", "lost", "delayed", "spurious"}

var _ driver.Notifier = (*chaosStore)(nil)

// Await implements driver.Notifier: the wrapped store's Await, or its
// Claim when it does not notify, under the faults of a claim.
func (c *chaosStore) Await(ctx context.Context, req driver.ClaimRequest) (driver.ClaimReply, error) {
	if n, ok := c.inner.(driver.Notifier); ok {
		return c.claim(ctx, req, n.Await)
	}
	return c.claim(ctx, req, c.inner.Claim)
}

// errNoSignal is Listen's error on a store that does not notify: the Guard
// then polls.
var errNoSignal = errors.New("storetest: the store under test does not notify")

// Listen implements driver.Notifier.
func (c *chaosStore) Listen(ctx context.Context, notify func(key string)) (driver.Listener, error) {
	n, ok := c.inner.(driver.Notifier)
	if !ok {
		return nil, errNoSignal
	}
	l := &chaosListener{c: c, notify: notify}
	inner, err := n.Listen(ctx, l.pass)
	if err != nil {
		return nil, err
	}
	l.Listener = inner
	return l, nil
}

// pickSignal draws the fault of one notification, and its delay.
func (c *chaosStore) pickSignal() (signalFault, time.Duration) {
	if !c.stormy.Load() {
		return signalPass, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rng.Float64() >= c.rate {
		return signalPass, 0
	}
	f := signalFault(1 + c.rng.IntN(int(numSignalFaults)-1))
	c.signals[f]++
	return f, time.Duration(c.rng.Int64N(int64(c.timeout)))
}

// chaosListener is a Listener whose notifications meet the Chaos store's
// signal faults. A delayed one is delivered by a timer, which Close stops
// or waits for.
type chaosListener struct {
	driver.Listener
	c      *chaosStore
	notify func(key string)

	mu      sync.Mutex
	closed  bool
	pending map[*time.Timer]struct{}
	wg      sync.WaitGroup // delayed notifications being delivered
}

func (l *chaosListener) pass(key string) {
	f, d := l.c.pickSignal()
	switch f {
	case signalLost:
	case signalDelayed:
		l.later(key, d)
	case signalSpurious:
		l.notify(key)
		l.notify("")
	default:
		l.notify(key)
	}
}

// later delivers key's notification after d, unless the Listener closes
// first.
func (l *chaosListener) later(key string, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	if l.pending == nil {
		l.pending = make(map[*time.Timer]struct{})
	}
	var t *time.Timer
	l.wg.Add(1)
	t = time.AfterFunc(d, func() {
		defer l.wg.Done()
		l.mu.Lock()
		_, live := l.pending[t]
		delete(l.pending, t)
		closed := l.closed
		l.mu.Unlock()
		if live && !closed {
			l.notify(key)
		}
	})
	l.pending[t] = struct{}{}
}

// Close implements driver.Listener: no notification comes after it returns.
func (l *chaosListener) Close() error {
	err := l.Listener.Close()
	l.mu.Lock()
	l.closed = true
	for t := range l.pending {
		if t.Stop() {
			l.wg.Done() // its function never runs
		}
	}
	clear(l.pending)
	l.mu.Unlock()
	l.wg.Wait()
	return err
}
