package memstore

import (
	"context"
	"errors"
	"sync"

	"github.com/jobonce/jobonce/core/driver"
)

// Await implements driver.Notifier: Claim, and a key found held by another
// token's live claim is marked awaited until that claim ends, so that its
// Complete or Release notifies the Store's listeners of the key.
func (s *Store) Await(ctx context.Context, req driver.ClaimRequest) (driver.ClaimReply, error) {
	return s.claim(ctx, req, true)
}

// Listen implements driver.Notifier. The Listener runs no goroutine: notify
// is called by the Complete or Release that ends an awaited claim, and by
// Add.
func (s *Store) Listen(_ context.Context, notify func(key string)) (driver.Listener, error) {
	if notify == nil {
		return nil, errors.New("jobonce: memstore: Listen: notify is nil")
	}
	l := &listener{s: s, notify: notify, keys: make(map[string]struct{})}
	s.mu.Lock()
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	return l, nil
}

// notifyUnlock unlocks s.mu and, when the ended claim of key was awaited,
// notifies the listeners of key.
func (s *Store) notifyUnlock(key string, awaited bool) {
	if !awaited {
		s.mu.Unlock()
		return
	}
	ls := make([]*listener, 0, len(s.listeners))
	for l := range s.listeners {
		ls = append(ls, l)
	}
	s.mu.Unlock()
	for _, l := range ls {
		l.tell(key)
	}
}

// listener is a memstore driver.Listener.
type listener struct {
	s      *Store
	notify func(key string)

	mu     sync.Mutex // held while notify runs, so that none runs after Close
	keys   map[string]struct{}
	closed bool
}

// tell notifies key if l listens to it.
func (l *listener) tell(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.keys[key]; ok && !l.closed {
		l.notify(key)
	}
}

// Add implements driver.Listener: listening begins at once, and notify
// reports key before Add returns.
func (l *listener) Add(_ context.Context, key string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("jobonce: memstore: Listener is closed")
	}
	l.keys[key] = struct{}{}
	l.notify(key)
	return nil
}

// Remove implements driver.Listener.
func (l *listener) Remove(_ context.Context, key string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.keys, key)
	return nil
}

// Close implements driver.Listener.
func (l *listener) Close() error {
	l.s.mu.Lock()
	delete(l.s.listeners, l)
	l.s.mu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	return nil
}
