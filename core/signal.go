package core

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jobonce/jobonce/core/driver"
)

// signal is a Guard's completion signal: one driver.Listener, shared by
// every copy of the Guard that waits for a running claim. The first copy to
// wait opens it, each copy adds its key, and the last copy to leave closes
// it, which ends the Listener's goroutines: none outlives the waits.
//
// No copy queues behind another's Listener call for longer than its own
// context (joining) or one timeout (leaving): a copy whose context ends
// while another opens or adds polls instead of listening, and a copy that
// leaves while another holds the Listener for a whole timeout skips its
// Remove (a key left listened to costs a notification nobody reads; Close
// drops it). Whoever holds the Listener closes it, before letting go, once
// nobody waits, so it outlives the last copy by one call at most.
type signal struct {
	notifier driver.Notifier
	timeout  time.Duration // bounds each call to the Listener

	// sem, a one-slot semaphore, serialises opening, adding, removing and
	// closing, so that a key one copy removes as another adds it stays
	// listened to. It guards listener and failed.
	sem      chan struct{}
	listener driver.Listener // nil while nobody waits, or it failed to open
	failed   time.Time       // when opening it last failed

	mu      sync.Mutex
	waiters map[string][]*waiter // by stored key
	count   int
}

// reopenAfter is how long after a Listener failed to open copies that wait
// poll rather than try again.
const reopenAfter = time.Second

func newSignal(n driver.Notifier, timeout time.Duration) *signal {
	return &signal{notifier: n, timeout: timeout, sem: make(chan struct{}, 1),
		waiters: make(map[string][]*waiter)}
}

// waiter is one copy waiting for the running claim of its key.
type waiter struct {
	s    *signal
	key  string
	wake chan struct{} // signalled when the key's state is to be read again
	// listening: the key's notifications come (join added it to the
	// Listener), and the first one says listening has begun. Otherwise the
	// copy polls.
	listening bool
}

// join registers a copy waiting for key and, when the store notifies,
// listens to key for it. It waits for another copy's Listener call only
// while ctx lasts (the copy then polls), and its own call lasts the timeout
// at most. On a nil signal (a store that does not notify) it returns a
// waiter that polls. Call leave when the wait ends.
func (s *signal) join(ctx context.Context, key string) *waiter {
	w := &waiter{s: s, key: key, wake: make(chan struct{}, 1)}
	if s == nil {
		return w
	}
	s.mu.Lock()
	s.waiters[key] = append(s.waiters[key], w)
	s.count++
	s.mu.Unlock()
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return w
	}
	defer s.release()
	// The Listener is shared: opening or adding to it is bounded by the
	// timeout alone, not by the copy's cancellation.
	ctx, cancel := context.WithTimeout(detach(ctx), s.timeout)
	defer cancel()
	if s.listener == nil {
		if time.Since(s.failed) < reopenAfter {
			return w
		}
		l, err := s.notifier.Listen(ctx, s.notify)
		if err != nil || l == nil {
			s.failed = time.Now()
			return w
		}
		s.listener = l
	}
	w.listening = s.listener.Add(ctx, key) == nil
	return w
}

// leave ends w's wait: the last copy waiting for its key stops listening to
// it, and the last copy of all closes the Listener. It waits for another
// copy's Listener call and makes its own within one timeout, and skips the
// Remove when that runs out.
func (w *waiter) leave() {
	s := w.s
	if s == nil {
		return
	}
	s.mu.Lock()
	ws := slices.DeleteFunc(s.waiters[w.key], func(x *waiter) bool { return x == w })
	if len(ws) == 0 {
		delete(s.waiters, w.key)
	} else {
		s.waiters[w.key] = ws
	}
	s.count--
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return // the copy holding the Listener closes it if nobody waits
	}
	defer s.release()
	s.mu.Lock()
	_, waited := s.waiters[w.key] // by a copy that joined since
	empty := s.count == 0
	s.mu.Unlock()
	if s.listener != nil && !waited && !empty {
		_ = s.listener.Remove(ctx, w.key) // a key left listened to costs a notification nobody reads
	}
}

// release lets go of the Listener, closing it first when nobody waits. The
// semaphore is held.
func (s *signal) release() {
	s.mu.Lock()
	empty := s.count == 0
	s.mu.Unlock()
	if empty && s.listener != nil {
		_ = s.listener.Close() // a Listener that failed to close has no goroutine left either
		s.listener = nil
	}
	<-s.sem
}

// notify wakes the copies waiting for key, or every copy for "".
func (s *signal) notify(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if key == "" {
		for _, ws := range s.waiters {
			for _, w := range ws {
				w.poke()
			}
		}
		return
	}
	for _, w := range s.waiters[key] {
		w.poke()
	}
}

// poke asks w to read its key's state again, without blocking: a poke that
// finds one pending is the same request.
func (w *waiter) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}
