package testenv

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/redisstore"
)

// HangingStore wraps a store whose claims, while Hang is set, get no answer:
// they wait for their context to end, as calls to a store that stopped
// responding do. Each hanging claim is signalled on Hung.
type HangingStore struct {
	driver.BatchStore
	Hang atomic.Bool
	Hung chan struct{}
}

// HangingRedis returns a HangingStore over a redisstore on rdb, hanging
// from the start.
func HangingRedis(t testing.TB, rdb *redis.Client) *HangingStore {
	t.Helper()
	store, err := redisstore.New(rdb, nil)
	if err != nil {
		t.Fatalf("redisstore: %v", err)
	}
	return NewHangingStore(store)
}

// Outcomes records the events a Guard observes, counted by outcome; its
// Observe is a core.Observer.
type Outcomes struct {
	n      [16]atomic.Int64
	mu     sync.Mutex
	events []core.Event
}

// Observe counts and keeps e.
func (o *Outcomes) Observe(_ context.Context, e core.Event) {
	o.n[e.Outcome].Add(1)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, e)
}

// Get returns how many times out was observed.
func (o *Outcomes) Get(out core.Outcome) int64 { return o.n[out].Load() }

// Events returns the events observed so far, in order.
func (o *Outcomes) Events() []core.Event {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]core.Event(nil), o.events...)
}

// NewHangingStore wraps s, hanging from the start. A store that is not a
// driver.BatchStore (memstore) has its batches run one call at a time.
func NewHangingStore(s driver.Store) *HangingStore {
	bs, ok := s.(driver.BatchStore)
	if !ok {
		bs = oneByOne{s}
	}
	h := &HangingStore{BatchStore: bs, Hung: make(chan struct{}, 100)}
	h.Hang.Store(true)
	return h
}

// OneByOne is a driver.BatchStore that runs each request of a batch as its
// own call of s: a store without batches of its own under the group commit.
func OneByOne(s driver.Store) driver.BatchStore { return oneByOne{s} }

type oneByOne struct{ driver.Store }

func (s oneByOne) Batch(ctx context.Context, completes []driver.CompleteRequest, claims []driver.ClaimRequest) ([]driver.ClaimReply, []error, []error) {
	replies, claimErrs, completeErrs := make([]driver.ClaimReply, len(claims)), make([]error, len(claims)), make([]error, len(completes))
	for i, r := range completes {
		completeErrs[i] = s.Complete(ctx, r)
	}
	for i, r := range claims {
		replies[i], claimErrs[i] = s.Claim(ctx, r)
	}
	return replies, claimErrs, completeErrs
}

func (s *HangingStore) wait(ctx context.Context) error {
	select {
	case s.Hung <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return ctx.Err()
}

// Claim implements driver.Store.
func (s *HangingStore) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimReply, error) {
	if s.Hang.Load() {
		return driver.ClaimReply{}, s.wait(ctx)
	}
	return s.BatchStore.Claim(ctx, req)
}

// Batch implements driver.BatchStore.
func (s *HangingStore) Batch(ctx context.Context, completes []driver.CompleteRequest, claims []driver.ClaimRequest) ([]driver.ClaimReply, []error, []error) {
	if s.Hang.Load() {
		err := s.wait(ctx)
		claimErrs, completeErrs := make([]error, len(claims)), make([]error, len(completes))
		for i := range claimErrs {
			claimErrs[i] = err
		}
		for i := range completeErrs {
			completeErrs[i] = err
		}
		return make([]driver.ClaimReply, len(claims)), claimErrs, completeErrs
	}
	return s.BatchStore.Batch(ctx, completes, claims)
}
