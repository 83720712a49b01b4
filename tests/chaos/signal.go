package chaos

import (
	"context"
	"errors"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
)

// The Chaos store's completion signal: it notifies when the wrapped store
// does, and while stormy it loses notifications, delays them (up to the
// store timeout), makes up spurious ones, for a key or for every key, goes
// deaf for a while and then notifies every key (a Listener whose connection
// broke and came back), and refuses to listen, or to listen to a key (a
// forbidden channel). A waiting copy must settle all the same, by its own
// deadline.

// signalFault is what a Chaos Listener does to one notification.
type signalFault uint8

const (
	signalPass signalFault = iota
	signalLost
	signalDelayed
	signalSpurious
	signalReconnect
	signalRefused // drawn at Listen and Add, not per notification
	numSignalFaults
)

var signalFaultNames = [numSignalFaults]string{"pass", "lost", "delayed", "spurious", "reconnect", "refused"}

var _ driver.Notifier = (*chaosStore)(nil)

// Await implements driver.Notifier: the wrapped store's Await, or its
// Claim when it does not notify, under the faults of a claim.
func (c *chaosStore) Await(ctx context.Context, req driver.ClaimRequest) (driver.ClaimReply, error) {
	if n, _ := ctx.Value(stormReadsKey{}).(*atomic.Int64); n != nil {
		n.Add(1)
	}
	if n, ok := c.inner.(driver.Notifier); ok {
		return c.claim(ctx, req, n.Await)
	}
	return c.claim(ctx, req, c.inner.Claim)
}

// errNoSignal is Listen's error on a store that does not notify: the Guard
// then polls.
var errNoSignal = errors.New("chaos: the store under test does not notify")

// errRefused is the error of a Listen or an Add that the Chaos store
// refuses, as a server refuses a channel the user may not use.
var errRefused = errors.New("chaos: injected: channel refused")

// Listen implements driver.Notifier.
func (c *chaosStore) Listen(ctx context.Context, notify func(key string)) (driver.Listener, error) {
	n, ok := c.inner.(driver.Notifier)
	if !ok {
		return nil, errNoSignal
	}
	if c.pickRefusal() {
		return nil, errRefused
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
	f := signalFault(1 + c.rng.IntN(int(signalRefused)-1))
	c.signals[f]++
	return f, time.Duration(c.rng.Int64N(int64(c.timeout)))
}

// pickRefusal draws whether a Listen or an Add is refused: while stormy,
// at a sixth of the fault rate.
func (c *chaosStore) pickRefusal() bool {
	if !c.stormy.Load() {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rng.Float64() >= c.rate/6 {
		return false
	}
	c.signals[signalRefused]++
	return true
}

// chaosListener is a Listener whose notifications meet the Chaos store's
// signal faults. A delayed one, and the notification of every key that
// ends a deaf spell, are delivered by a timer, which Close stops or waits
// for.
type chaosListener struct {
	driver.Listener
	c      *chaosStore
	notify func(key string)

	mu      sync.Mutex
	closed  bool
	deaf    time.Time // notifications are lost until then
	pending map[*time.Timer]struct{}
	wg      sync.WaitGroup // delayed notifications being delivered
}

func (l *chaosListener) pass(key string) {
	l.mu.Lock()
	deaf := time.Now().Before(l.deaf)
	l.mu.Unlock()
	if deaf {
		return
	}
	f, d := l.c.pickSignal()
	switch f {
	case signalLost:
	case signalDelayed:
		l.later(key, d)
	case signalSpurious:
		l.notify(key)
		l.notify("")
	case signalReconnect:
		// Deaf until the connection comes back, which then notifies every
		// key: what came meanwhile is lost.
		l.mu.Lock()
		l.deaf = time.Now().Add(d)
		l.mu.Unlock()
		l.later("", d)
	default:
		l.notify(key)
	}
}

// Add implements driver.Listener: the wrapped Listener's, unless the Chaos
// store refuses the key's channel.
func (l *chaosListener) Add(ctx context.Context, key string) error {
	if l.c.pickRefusal() {
		return errRefused
	}
	return l.Listener.Add(ctx, key)
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

// stormReadsKey is the context key of a storm delivery's count of the
// Await calls it made.
type stormReadsKey struct{}

// storms runs, in the Wait mode, a storm of waiters now and then: many
// deliveries of one hot key arriving a few milliseconds apart, each waiting
// for its running copy, as the consumers of many processes receive the
// copies of one message. It returns once the run ended and every storm
// delivery returned.
func (r *chaosRun) storms(rng *mrand.Rand, stop <-chan struct{}) {
	var wg sync.WaitGroup
	defer wg.Wait()
	pause := func(d time.Duration) bool {
		select {
		case <-stop:
			return false
		case <-time.After(d):
			return time.Now().Before(r.end)
		}
	}
	for pause(time.Duration(50+rng.IntN(250)) * time.Millisecond) {
		key := r.key(rng)
		n := 16 + rng.IntN(33)
		for range n {
			seed := rng.Uint64()
			wg.Go(func() { r.deliverWaiting(mrand.New(mrand.NewPCG(seed, 7)), key) })
			if !pause(time.Duration(rng.IntN(3)) * time.Millisecond) {
				return
			}
		}
	}
}

// deliverWaiting is deliverDo for key, waiting for its running copy for up
// to two store timeouts, and counting the key's reads it makes (Await).
func (r *chaosRun) deliverWaiting(rng *mrand.Rand, key string) {
	c := r.newCall(rng)
	defer c.close()
	reads := new(atomic.Int64)
	c.ctx = context.WithValue(c.ctx, stormReadsKey{}, reads)
	d := &delivery{call: c, key: key}
	fn := r.job(c, d.key, r.plan(rng), &d.run)
	until := time.Now().Add(time.Duration(rng.Int64N(int64(2 * r.st))))
	func() {
		defer func() { d.panicked = recover() }()
		var res core.Result
		// A storm's copies wait past the Guard's limits on waiting copies,
		// as copies held in their workers anyway do (core.Job.HoldsWorker).
		res, d.err = r.g.Run(c.ctx, core.Job{Key: d.key, WaitUntil: until, HoldsWorker: true}, fn)
		d.out, d.value = res.Outcome, res.Value
	}()
	ret := time.Now()
	d.final = true
	wait := waitFrom(c.start, until)
	if d.run != nil {
		d.answered = d.run.start
		d.phases = []phase{
			{name: "claim", from: c.start, to: d.run.start, ctxBound: true, wait: wait},
			{name: "done marker", from: d.run.stop, to: ret, budget: r.st + completeBackoffs},
		}
	} else {
		d.answered = ret
		d.phases = []phase{{name: "claim", from: c.start, to: ret, ctxBound: true, wait: wait}}
	}
	r.truth.resolve(d)
	r.checkLater(d)
	if evs := c.eventsFor(key); len(evs) == 1 && evs[0].Waited > 0 {
		n := int(reads.Load())
		t := r.truth
		t.mu.Lock()
		t.counts["storm copies that waited"]++
		t.counts["storm reads"] += n
		t.counts["storm reads of one copy, most"] = max(t.counts["storm reads of one copy, most"], n)
		t.mu.Unlock()
	}
}
