package memstore

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jobonce/jobonce/core/driver"
)

// Store is an in-process driver.Store. The zero value is not ready; use New.
//
// A claim's fence is the larger of time.Now in microseconds since the Unix
// epoch and one more than the key's previous fence. The Store keeps each
// key's last fence for its whole life, after the key is released or expires,
// so fences of a key always increase, whatever the clock does; its memory
// grows by one small map entry per distinct key ever claimed.
type Store struct {
	mu        sync.Mutex
	entries   map[string]*entry
	fences    map[string]int64 // the last fence of every key ever claimed
	now       func() time.Time
	expiring  expiryQueue            // when entries expire, for sweep
	listeners map[*listener]struct{} // open Listeners (Listen)
}

type entry struct {
	done        bool
	awaited     bool         // a running claim that Await found: its end notifies
	token       driver.Token // the claim's, or the one that wrote the done marker
	fence       int64
	fingerprint string
	result      []byte
	expires     time.Time
}

var _ driver.Notifier = (*Store)(nil)

// New returns an empty Store.
func New() *Store {
	return &Store{entries: make(map[string]*entry), fences: make(map[string]int64), now: time.Now,
		listeners: make(map[*listener]struct{})}
}

// live returns key's entry if it has not expired.
func (s *Store) live(key string, now time.Time) *entry {
	e := s.entries[key]
	if e == nil || !now.Before(e.expires) {
		delete(s.entries, key)
		return nil
	}
	return e
}

// checkDuration rejects leases and retentions under 1ms, as every jobonce
// store does (Redis keeps expiries in whole milliseconds).
func checkDuration(field string, d time.Duration) error {
	if d < time.Millisecond {
		return fmt.Errorf("jobonce: memstore: %s must be at least 1ms, got %s", field, d)
	}
	return nil
}

// Claim implements driver.Store. A key already held by req.Token (the same
// request sent again) is reported claimed, with the fence it got then. A
// lease under 1ms gives an error.
func (s *Store) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimReply, error) {
	return s.claim(ctx, req, false)
}

// claim is Claim; with await, a key found running is marked awaited.
func (s *Store) claim(ctx context.Context, req driver.ClaimRequest, await bool) (driver.ClaimReply, error) {
	if err := ctx.Err(); err != nil {
		return driver.ClaimReply{}, err
	}
	if err := checkDuration("ClaimRequest.Lease", req.Lease); err != nil {
		return driver.ClaimReply{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.sweep(now)
	if e := s.live(req.Key, now); e != nil {
		if !e.done && e.token == req.Token {
			return driver.ClaimReply{State: driver.StateClaimed, Fence: e.fence}, nil
		}
		if e.done {
			return driver.ClaimReply{State: driver.StateDone, Fingerprint: e.fingerprint, Result: bytes.Clone(e.result),
				Remaining: e.expires.Sub(now)}, nil
		}
		e.awaited = e.awaited || await
		return driver.ClaimReply{State: driver.StateRunning, Fingerprint: e.fingerprint, Remaining: e.expires.Sub(now), Fence: e.fence}, nil
	}
	fence := max(now.UnixMicro(), s.fences[req.Key]+1)
	s.fences[req.Key] = fence
	s.entries[req.Key] = &entry{token: req.Token, fence: fence, fingerprint: req.Fingerprint, expires: now.Add(req.Lease)}
	s.expiring.add(req.Key, now.Add(req.Lease))
	return driver.ClaimReply{State: driver.StateClaimed, Fence: fence}, nil
}

// held returns the live claim on key held by token, or nil.
func (s *Store) held(key string, token driver.Token) *entry {
	e := s.live(key, s.now())
	if e == nil || e.done || e.token != token {
		return nil
	}
	return e
}

// Extend implements driver.Store. A lease under 1ms gives an error.
func (s *Store) Extend(ctx context.Context, key string, token driver.Token, lease time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkDuration("Extend lease", lease); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.held(key, token)
	if e == nil {
		return driver.ErrLeaseLost
	}
	e.expires = s.now().Add(lease)
	s.expiring.add(key, e.expires)
	return nil
}

// Complete implements driver.Store. The done marker keeps req.Result as given:
// a nil Result comes back nil, an empty one empty. It keeps req.Token too, so
// a complete sent again by the same claim answers nil, the marker unchanged.
// A retention under 1ms gives an error.
func (s *Store) Complete(ctx context.Context, req driver.CompleteRequest) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkDuration("CompleteRequest.Retention", req.Retention); err != nil {
		return err
	}
	s.mu.Lock()
	now := s.now()
	e := s.live(req.Key, now)
	if e == nil || e.token != req.Token {
		s.mu.Unlock()
		return driver.ErrLeaseLost
	}
	awaited := !e.done && e.awaited
	if !e.done {
		*e = entry{done: true, token: req.Token, fingerprint: req.Fingerprint, result: bytes.Clone(req.Result), expires: now.Add(req.Retention)}
		s.expiring.add(req.Key, e.expires)
	}
	s.notifyUnlock(req.Key, awaited)
	return nil
}

// Release implements driver.Store.
func (s *Store) Release(ctx context.Context, key string, token driver.Token) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	e := s.held(key, token)
	if e == nil {
		s.mu.Unlock()
		return driver.ErrLeaseLost
	}
	delete(s.entries, key)
	s.notifyUnlock(key, e.awaited)
	return nil
}

// len returns the number of live entries (claims and done markers).
func (s *Store) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	n := 0
	for key := range s.entries {
		if s.live(key, now) != nil {
			n++
		}
	}
	return n
}

// sweep drops the entries that have expired by now, at each claim, so the
// memory of claims and done markers follows the live ones. Each time an
// entry's expiry is set is queued once and taken once, so a claim costs
// O(log n) on average, however many entries are live. Fences stay.
func (s *Store) sweep(now time.Time) {
	for {
		key, ok := s.expiring.due(now)
		if !ok {
			return
		}
		s.live(key, now) // drops it if it has expired; a later expiry was queued too
	}
}
