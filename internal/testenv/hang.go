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

// oneByOne is a driver.BatchStore that runs each request of a batch as its own
// call.
type oneByOne struct{ driver.Store }

func (s oneByOne) ClaimBatch(ctx context.Context, reqs []driver.ClaimRequest) ([]driver.ClaimReply, []error) {
	replies, errs := make([]driver.ClaimReply, len(reqs)), make([]error, len(reqs))
	for i, r := range reqs {
		replies[i], errs[i] = s.Claim(ctx, r)
	}
	return replies, errs
}

func (s oneByOne) CompleteBatch(ctx context.Context, reqs []driver.CompleteRequest) []error {
	errs := make([]error, len(reqs))
	for i, r := range reqs {
		errs[i] = s.Complete(ctx, r)
	}
	return errs
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

// ClaimBatch implements driver.BatchStore.
func (s *HangingStore) ClaimBatch(ctx context.Context, reqs []driver.ClaimRequest) ([]driver.ClaimReply, []error) {
	if s.Hang.Load() {
		err := s.wait(ctx)
		errs := make([]error, len(reqs))
		for i := range errs {
			errs[i] = err
		}
		return make([]driver.ClaimReply, len(reqs)), errs
	}
	return s.BatchStore.ClaimBatch(ctx, reqs)
}
