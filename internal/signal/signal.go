// Package signal is the completion signal: one driver.Listener shared by
// the copies of a Guard that wait for a running claim of their key, which
// wakes each copy when its key's claim may have ended.
package signal

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/internal/storecall"
)

// Signal is a Guard's completion signal: one driver.Listener, shared by
// every copy of the Guard that waits for a running claim. The first copy to
// wait opens it; it stays open for listenerIdle after the last copy left,
// so that a trickle of waits does not open a connection each, and is then
// closed, ending its goroutines (Close closes it sooner).
//
// A key is added to the Listener once, by the first copy that waits for it,
// and removed when the last one leaves. A copy that joins a key whose
// listening has begun reads it at once; one that joins while the key is
// being added waits for that Add (within its own context) and is woken by
// its notification with the others. So a copy's reads of an unchanged key
// do not grow with the copies that wait beside it: each notification of
// the key (listening begun or resumed, the running claim ended) wakes each
// of its copies once, and a key notified more than NotifyBurst times in a
// row is notified at most once per NotifyEvery, the notifications held back
// delivered together, so that forged notifications cost each copy a read
// per NotifyEvery at most.
//
// A Listener that cannot be opened is logged at Warn, once until one opens;
// meanwhile copies poll.
//
// No copy queues behind another's Listener call for longer than its own
// context: a copy whose context ends while another opens or adds polls
// instead of listening, and a copy that leaves while another holds the
// Listener leaves its Remove to that one.
type Signal struct {
	notifier driver.Notifier
	timeout  time.Duration // bounds each call to the Listener
	idle     time.Duration // how long the Listener outlives the last copy
	logger   *slog.Logger

	// sem, a one-slot semaphore, serialises opening, adding, removing and
	// closing, so that a key one copy removes as another adds it stays
	// listened to. It guards listener and failed.
	sem      chan struct{}
	listener driver.Listener // nil while closed, or when it failed to open
	failed   time.Time       // when opening it last failed
	warned   bool            // its failure to open was logged, and it has not opened since

	mu        sync.Mutex
	keys      map[string]*keyWait // by stored key
	count     int                 // copies waiting
	all       budget              // the notifications of every key ("")
	idleTimer *time.Timer         // closes the Listener once idle; nil while copies wait
	idleGen   uint64              // bumped whenever the count leaves zero, so a stale timer does nothing
	closeNow  bool                // Close was called while copies waited
	removes   []string            // keys nobody waits for, to be removed by the Listener's holder
}

const (
	// reopenAfter is how long after a Listener failed to open copies that
	// wait poll rather than try again.
	reopenAfter = time.Second
	// listenerIdle is how long the Listener stays open once no copy waits.
	listenerIdle = time.Minute
	// NotifyBurst and NotifyEvery bound how often one key's notifications
	// wake its copies: NotifyBurst at once, then one per NotifyEvery.
	NotifyBurst = 4
	NotifyEvery = 50 * time.Millisecond
)

// New returns the completion signal of notifier n, each Listener call
// bounded by timeout, logging to logger.
func New(n driver.Notifier, timeout time.Duration, logger *slog.Logger) *Signal {
	return &Signal{notifier: n, timeout: timeout, idle: listenerIdle, logger: logger, sem: make(chan struct{}, 1),
		keys: make(map[string]*keyWait), all: newBudget()}
}

// keyWait is the copies waiting for one key and the key's listening.
type keyWait struct {
	waiters   []*Waiter
	adding    chan struct{} // closed when the Add under way ends; nil when none is
	listening bool          // the Listener's Add of the key succeeded
	heard     bool          // a notification came since the Add began: listening has begun
	budget                  // of the key's notifications
}

// budget bounds how often notifications wake copies: a token bucket of
// NotifyBurst, refilled one per NotifyEvery, and the timer of a
// notification held back.
type budget struct {
	tokens float64
	filled time.Time
	held   *time.Timer
}

func newBudget() budget { return budget{tokens: NotifyBurst} }

// Waiter is one copy waiting for the running claim of its key.
type Waiter struct {
	s    *Signal
	key  string
	wake chan struct{} // signalled when the key's state is to be read again
	// listening: the key's notifications come (its Add succeeded), the
	// first one once listening has begun, or at once when it had. Otherwise
	// the copy polls.
	listening bool
}

// Join registers a copy waiting for key and, when the store notifies,
// listens to key for it. It waits for another copy's Listener call only
// while ctx lasts (the copy then polls), and its own call lasts the timeout
// at most. On a nil signal (a store that does not notify) it returns a
// Waiter that polls. Call Leave when the wait ends.
func (s *Signal) Join(ctx context.Context, key string) *Waiter {
	w := &Waiter{s: s, key: key, wake: make(chan struct{}, 1)}
	if s == nil {
		return w
	}
	s.mu.Lock()
	if s.count == 0 {
		s.stopIdle()
	}
	s.count++
	k := s.keys[key]
	if k == nil {
		k = &keyWait{budget: newBudget()}
		s.keys[key] = k
	}
	k.waiters = append(k.waiters, w)
	if k.heard {
		w.poke() // listening has begun: read at once
	}
	if k.listening {
		w.listening = true
		s.mu.Unlock()
		return w
	}
	if adding := k.adding; adding != nil {
		s.mu.Unlock()
		select {
		case <-adding:
		case <-ctx.Done():
			return w
		}
		s.mu.Lock()
		w.listening = k.listening
		s.mu.Unlock()
		return w
	}
	adding := make(chan struct{})
	k.adding, k.heard = adding, false
	s.mu.Unlock()
	ok := s.add(ctx, key)
	s.mu.Lock()
	k.adding, k.listening, w.listening = nil, ok, ok
	if !ok {
		k.heard = false
	}
	s.mu.Unlock()
	close(adding)
	return w
}

// add adds key to the Listener, opening it first if need be, and reports
// whether it succeeded.
func (s *Signal) add(ctx context.Context, key string) bool {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	defer s.release()
	// The Listener is shared: opening or adding to it is bounded by the
	// timeout alone, not by the copy's cancellation.
	ctx, cancel := context.WithTimeout(storecall.Detach(ctx), s.timeout)
	defer cancel()
	if s.listener == nil {
		if time.Since(s.failed) < reopenAfter {
			return false
		}
		l, err := s.listen(ctx)
		if err != nil || l == nil {
			s.failed = time.Now()
			if !s.warned {
				s.warned = true
				s.logger.Warn("jobonce: the completion signal could not listen to the store: copies that wait for a running job poll it until it can",
					"error", err)
			}
			return false
		}
		s.listener, s.warned = l, false
	}
	return listenerCall(func() error { return s.listener.Add(ctx, key) }) == nil
}

// listen opens a Listener; a Listen that panics failed.
func (s *Signal) listen(ctx context.Context) (l driver.Listener, err error) {
	defer storecall.Recover(&err)
	return s.notifier.Listen(ctx, s.notify)
}

// listenerCall runs one call of the Listener's; one that panics failed, as
// a store call that panics does, and the copy that made it polls.
func listenerCall(call func() error) (err error) {
	defer storecall.Recover(&err)
	return call()
}

// Leave ends w's wait: the last copy waiting for its key stops listening to
// it, and once no copy waits the Listener closes after s.idle. It never
// waits for another copy's Listener call: when one holds the Listener, the
// Remove is left to it (see release).
func (w *Waiter) Leave() {
	s := w.s
	if s == nil {
		return
	}
	s.mu.Lock()
	k := s.keys[w.key]
	k.waiters = slices.DeleteFunc(k.waiters, func(x *Waiter) bool { return x == w })
	if len(k.waiters) == 0 {
		delete(s.keys, w.key)
		k.stop()
		if k.listening {
			s.removes = append(s.removes, w.key)
		}
	}
	s.count--
	if s.count == 0 && !s.closeNow {
		s.startIdle()
	}
	work := len(s.removes) > 0 || (s.count == 0 && s.closeNow)
	held := false
	if work {
		select {
		case s.sem <- struct{}{}:
			held = true
		default: // its holder does the work before letting go
		}
	}
	s.mu.Unlock()
	if held {
		s.release()
	}
}

// release does what copies that left while the Listener was held left to
// do, the Removes of keys nobody waits for any more (a key left listened to
// costs a notification nobody reads) and the close Close asked for,
// then lets go of the Listener. The semaphore is held.
func (s *Signal) release() {
	for {
		s.mu.Lock()
		removes := slices.DeleteFunc(s.removes, func(key string) bool {
			_, waited := s.keys[key] // by a copy that joined since
			return waited
		})
		s.removes = nil
		closeNow := s.count == 0 && s.closeNow
		if len(removes) == 0 && !closeNow {
			<-s.sem // under s.mu, so that a copy that leaves finds the work taken or the Listener free
			s.mu.Unlock()
			return
		}
		if closeNow {
			s.closeNow = false
		}
		s.mu.Unlock()
		if s.listener != nil && len(removes) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
			for _, key := range removes {
				_ = listenerCall(func() error { return s.listener.Remove(ctx, key) })
			}
			cancel()
		}
		if closeNow {
			_ = s.closeListener()
		}
	}
}

// closeListener closes the Listener. The semaphore is held.
func (s *Signal) closeListener() error {
	if s.listener == nil {
		return nil
	}
	err := listenerCall(s.listener.Close) // a Listener that failed to close has no goroutine left either, within its bound
	s.listener = nil
	return err
}

// startIdle starts the timer that closes the Listener once it has been
// idle for s.idle. s.mu is held and no copy waits.
func (s *Signal) startIdle() {
	since := s.idleGen
	s.idleTimer = time.AfterFunc(s.idle, func() {
		s.sem <- struct{}{}
		defer s.release()
		s.mu.Lock()
		idle := s.count == 0 && s.idleGen == since
		if idle {
			s.idleTimer = nil
		}
		s.mu.Unlock()
		if idle {
			_ = s.closeListener()
		}
	})
}

// stopIdle stops the idle timer as a copy begins to wait. s.mu is held.
func (s *Signal) stopIdle() {
	s.idleGen++
	if s.idleTimer != nil {
		s.idleTimer.Stop()
		s.idleTimer = nil
	}
}

// Close closes the Listener now when no copy waits, and otherwise as the
// last copy leaves, and returns the error of a Listener it closed.
func (s *Signal) Close() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	if s.count > 0 {
		s.closeNow = true
		s.mu.Unlock()
		return nil
	}
	s.stopIdle()
	s.mu.Unlock()
	s.sem <- struct{}{}
	defer s.release()
	s.mu.Lock()
	idle := s.count == 0
	s.mu.Unlock()
	if !idle {
		s.mu.Lock()
		s.closeNow = true
		s.mu.Unlock()
		return nil
	}
	return s.closeListener()
}

// notify wakes the copies waiting for key, or every copy for "". A key's
// notifications beyond its budget (and those of every key beyond the
// signal's) are held back and delivered together when the budget allows.
func (s *Signal) notify(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if key == "" {
		s.all.spend(&s.mu, func() {
			for _, k := range s.keys {
				k.wakeAll()
			}
		})
		return
	}
	k := s.keys[key]
	if k == nil {
		return
	}
	if k.listening || k.adding != nil {
		k.heard = true
	}
	k.spend(&s.mu, func() {
		if s.keys[key] == k {
			k.wakeAll()
		}
	})
}

// spend runs wake when the budget allows a notification now, and otherwise,
// unless one is held back already, holds this one back and runs wake, mu
// locked, once the budget allows it. mu is held.
func (b *budget) spend(mu *sync.Mutex, wake func()) {
	if b.held != nil {
		return // delivered with the one held back
	}
	wait := b.take(time.Now())
	if wait == 0 {
		wake()
		return
	}
	b.held = time.AfterFunc(wait, func() {
		mu.Lock()
		defer mu.Unlock()
		if b.held != nil {
			b.held = nil
			b.take(time.Now())
			wake()
		}
	})
}

// take takes one notification from the budget and returns zero, or, when
// it is spent, takes nothing and returns how long until it allows one.
func (b *budget) take(now time.Time) time.Duration {
	if !b.filled.IsZero() {
		b.tokens = min(NotifyBurst, b.tokens+float64(now.Sub(b.filled))/float64(NotifyEvery))
	}
	b.filled = now
	if b.tokens >= 1 {
		b.tokens--
		return 0
	}
	return max(time.Duration((1-b.tokens)*float64(NotifyEvery)), time.Microsecond)
}

// stop drops a notification held back.
func (b *budget) stop() {
	if b.held != nil {
		b.held.Stop()
		b.held = nil
	}
}

func (k *keyWait) wakeAll() {
	for _, w := range k.waiters {
		w.poke()
	}
}

// poke asks w to read its key's state again, without blocking: a poke that
// finds one pending is the same request.
func (w *Waiter) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Wake returns the channel that is signalled when w's key is to be read
// again.
func (w *Waiter) Wake() <-chan struct{} { return w.wake }

// Listening reports whether w's key's notifications come (its Add
// succeeded); otherwise the copy polls.
func (w *Waiter) Listening() bool { return w.listening }

// SetIdle sets how long the Listener stays open once no copy waits; call
// it before the first wait.
func (s *Signal) SetIdle(d time.Duration) { s.idle = d }
