package sqsonce

import (
	"sync"
	"time"
)

// receives counts, per message id, the receives one decorated handler saw of
// messages that came without ApproximateReceiveCount, so their delays still
// grow with every receive. It counts only what reaches this handler: the
// receives of other consumers do not raise it.
type receives struct {
	mu sync.Mutex
	n  map[string]seen
}

// seen is one message's count and when to forget it.
type seen struct {
	count int
	until time.Time
}

// receivesLimit bounds the messages counted; past it, the oldest counts give
// way (those messages count from 1 again).
const receivesLimit = 10000

// add counts one more receive of the message id and returns its count so far.
func (r *receives) add(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if r.n == nil {
		r.n = map[string]seen{}
	}
	s, ok := r.n[id]
	if !ok && len(r.n) >= receivesLimit {
		r.evict(now)
	}
	if !ok || now.After(s.until) {
		s = seen{}
	}
	s.count++
	s.until = now.Add(maxRetention)
	r.n[id] = s
	return s.count
}

// evict forgets the counts past their time, then, while the map is still
// full, the ones that would be forgotten first.
func (r *receives) evict(now time.Time) {
	var oldest string
	for id, s := range r.n {
		if now.After(s.until) {
			delete(r.n, id)
		} else if oldest == "" || s.until.Before(r.n[oldest].until) {
			oldest = id
		}
	}
	if len(r.n) >= receivesLimit {
		delete(r.n, oldest)
	}
}

// forget drops the count of a message that was deleted.
func (r *receives) forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.n, id)
}
