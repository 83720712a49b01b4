package core_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/internal/stall"
	"github.com/jobonce/jobonce/internal/testenv"
)

// TestFinishRejectsAClaimOfAnotherGuard: Finish given claims another Guard
// made (here on another Redis) writes no marker through its own store: it
// reports them Rejected and leaves them pending, and the Guard that claimed
// them finishes them as Ran, after which copies are Duplicates.
func TestFinishRejectsAClaimOfAnotherGuard(t *testing.T) {
	ctx := context.Background()
	var seen testenv.Outcomes
	mine := testenv.RedisGuard(t, &core.Config{Observer: seen.Observe})
	elsewhere := redis.NewClient(&redis.Options{Addr: testenv.StartRedisServer(t).Addr})
	t.Cleanup(func() { _ = elsewhere.Close() })
	other := testenv.RedisGuardOn(t, elsewhere, "jobonce:", nil)

	claims := mine.Claim(ctx, core.Job{Key: "a"}, core.Job{Key: "b"})
	for _, c := range claims {
		res, err := c.Work(ctx, func(context.Context) ([]byte, error) { return nil, nil })
		require.NoError(t, err)
		require.Equal(t, core.Ran, res.Outcome)
	}
	require.Equal(t, []core.Outcome{core.Rejected, core.Rejected}, other.Finish(ctx, claims...))
	require.Equal(t, []core.Outcome{core.Rejected}, other.Finish(ctx, claims[0]), "a single claim too")
	require.Zero(t, seen.Get(core.LeaseLost)+seen.Get(core.Ran), "nothing of mine was reported")

	require.Equal(t, []core.Outcome{core.Ran, core.Ran}, mine.Finish(ctx, claims...))
	for _, key := range []string{"a", "b"} {
		out, err := mine.Do(ctx, key, func(context.Context) error { return nil })
		require.NoError(t, err)
		require.Equal(t, core.Duplicate, out, "the marker of %s is in its own Guard's store", key)
	}
}

// countedBatches is a BatchStore on memstore that counts its Batch calls.
type countedBatches struct {
	*memstore.Store
	batches atomic.Int32
}

func (s *countedBatches) Batch(ctx context.Context, completes []driver.CompleteRequest, claims []driver.ClaimRequest) ([]driver.ClaimReply, []error, []error) {
	s.batches.Add(1)
	return testenv.OneByOne(s.Store).Batch(ctx, completes, claims)
}

// TestFinishWithNoPendingClaimCallsNoStore: a batch whose claims all
// settled in Work (duplicates, here) has no marker to write, and Finish
// reports their outcomes without a store round trip.
func TestFinishWithNoPendingClaimCallsNoStore(t *testing.T) {
	ctx := context.Background()
	s := &countedBatches{Store: memstore.New()}
	g := testenv.NewGuard(t, s, &core.Config{DisableGroupCommit: true})
	for _, key := range []string{"a", "b"} {
		_, err := g.Do(ctx, key, func(context.Context) error { return nil })
		require.NoError(t, err)
	}
	claims := g.Claim(ctx, core.Job{Key: "a"}, core.Job{Key: "b"})
	for _, c := range claims {
		res, err := c.Work(ctx, func(context.Context) ([]byte, error) { return nil, nil })
		require.NoError(t, err)
		require.Equal(t, core.Duplicate, res.Outcome)
	}
	before := s.batches.Load()
	require.Equal(t, []core.Outcome{core.Duplicate, core.Duplicate}, g.Finish(ctx, claims...))
	require.Equal(t, before, s.batches.Load(), "Finish made a store round trip with no marker to write")
}

// slowStore is a memstore under the group commit (a BatchStore, as
// redisstore and pgstore are) whose done markers, and whose claims for keys
// starting with "hang", get no answer until their context ends: a store that
// honours its context but does not answer.
type slowStore struct{ *memstore.Store }

func (s slowStore) Complete(ctx context.Context, _ driver.CompleteRequest) error {
	<-ctx.Done()
	return ctx.Err()
}

func (s slowStore) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimReply, error) {
	if strings.Contains(req.Key, "hang") {
		<-ctx.Done()
		return driver.ClaimReply{}, ctx.Err()
	}
	return s.Store.Claim(ctx, req)
}

func (s slowStore) Batch(ctx context.Context, completes []driver.CompleteRequest, claims []driver.ClaimRequest) ([]driver.ClaimReply, []error, []error) {
	return testenv.OneByOne(s).Batch(ctx, completes, claims)
}

// Invariant 3 for the done marker under the group commit: a caller whose
// context ends as its job ends is answered within one StoreTimeout (the
// bound TestCompleteRetriesShareOneStoreTimeout sets, on a store without
// batches): the marker's wait in the group commit's queue, its round trip
// and its retries share that one bound. When other callers' claims hang in
// every round trip the group has in flight, it is answered within two
// StoreTimeouts, the bound the group commit gives any call.
func TestMarkerAnsweredWithinOneStoreTimeout(t *testing.T) {
	const storeTimeout = 200 * time.Millisecond
	for _, othersHang := range []bool{false, true} {
		t.Run(fmt.Sprint("others' claims hang=", othersHang), func(t *testing.T) {
			g, err := core.New(slowStore{memstore.New()}, &core.Config{StoreTimeout: storeTimeout, PlainKeys: true})
			require.NoError(t, err)
			stalls := stall.Bound(t)
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			defer wg.Wait()
			var ended time.Time
			out, err := g.Do(ctx, "k", func(context.Context) error {
				if othersHang {
					// Other callers' claims fill every round trip in flight.
					for i := range core.GroupRoundTrips {
						wg.Go(func() { _, _ = g.Do(context.Background(), fmt.Sprint("hang-", i), mustNotRun) })
					}
					time.Sleep(20 * time.Millisecond)
				}
				cancel() // the caller gives up as the job ends
				ended = time.Now()
				return nil
			})
			waited := time.Since(ended)
			t.Logf("outcome %s err %v; answered %s after the caller's context ended", out, err, waited.Round(time.Millisecond))
			bound := storeTimeout + storeTimeout/2 // one StoreTimeout, and half of it as slack
			if othersHang {
				bound = 2 * storeTimeout // even the group commit's own "two timeouts"
			}
			stalls.RequireWithin(t, ended, bound, "answered within its own context plus one bounded store call (StoreTimeout %s)", storeTimeout)
		})
	}
}

// busyClaims is a memstore under the group commit whose claims for keys
// containing "hang" get no answer until their context ends, and whose done
// markers take a short while (a round trip under load), honouring ctx.
type busyClaims struct {
	*memstore.Store
	entered chan struct{}
}

func (s busyClaims) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimReply, error) {
	if strings.Contains(req.Key, "hang") {
		s.entered <- struct{}{}
		<-ctx.Done()
		return driver.ClaimReply{}, ctx.Err()
	}
	return s.Store.Claim(ctx, req)
}

func (s busyClaims) Complete(ctx context.Context, req driver.CompleteRequest) error {
	select {
	case <-time.After(20 * time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Store.Complete(ctx, req)
}

func (s busyClaims) Batch(ctx context.Context, completes []driver.CompleteRequest, claims []driver.ClaimRequest) ([]driver.ClaimReply, []error, []error) {
	return testenv.OneByOne(s).Batch(ctx, completes, claims)
}

// A done marker's attempts, its wait in the group commit's queue included,
// share one StoreTimeout, yet others' claims cannot use that budget up: when
// other callers' claims fill every round trip in flight for about a
// StoreTimeout (a store slow for their keys, such as PostgreSQL claims
// waiting on rows held by open transactions), the marker still gets a round
// trip of its own and is written (Ran), since the store is healthy for it,
// and a redelivery is a Duplicate.
func TestMarkerWrittenWhileOthersClaimsHang(t *testing.T) {
	const storeTimeout = 200 * time.Millisecond
	s := busyClaims{Store: memstore.New(), entered: make(chan struct{}, core.GroupRoundTrips)}
	g, err := core.New(s, &core.Config{StoreTimeout: storeTimeout, PlainKeys: true})
	require.NoError(t, err)
	var wg sync.WaitGroup
	defer wg.Wait()
	out, err := g.Do(context.Background(), "k", func(context.Context) error {
		// Other callers' claims fill every round trip in flight.
		for i := range core.GroupRoundTrips {
			wg.Go(func() { _, _ = g.Do(context.Background(), fmt.Sprint("hang-", i), mustNotRun) })
			<-s.entered
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, core.Ran, out, "the store was healthy for this job's marker")
	again, err := g.Do(context.Background(), "k", mustNotRun)
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, again, "and a redelivery is a Duplicate")
}

var errBatchesDown = errors.New("test: batches are down")

// recycledAnswers is a BatchStore on memstore whose batches of done markers
// are down: it answers each with one slice of failures it built once and
// hands out again (driver.BatchStore does not say the caller may write into
// the slices it is given). With completesDown, plain Completes fail too.
type recycledAnswers struct {
	*memstore.Store
	down          []error
	completesDown atomic.Bool
}

func newRecycledAnswers() *recycledAnswers {
	s := &recycledAnswers{Store: memstore.New(), down: make([]error, 8)}
	for i := range s.down {
		s.down[i] = errBatchesDown
	}
	return s
}

func (s *recycledAnswers) Complete(ctx context.Context, req driver.CompleteRequest) error {
	if s.completesDown.Load() {
		return errBatchesDown
	}
	return s.Store.Complete(ctx, req)
}

func (s *recycledAnswers) Batch(ctx context.Context, completes []driver.CompleteRequest, claims []driver.ClaimRequest) ([]driver.ClaimReply, []error, []error) {
	if len(completes) > 0 && len(claims) == 0 {
		return nil, nil, s.down[:len(completes)]
	}
	return testenv.OneByOne(s.Store).Batch(ctx, completes, claims)
}

// TestFinishLeavesTheStoresAnswersAlone: Finish reports Ran only for a
// marker the store wrote (invariant 7), and does not write its retries'
// answers into the slice a store's Batch returned: a store that answers
// again with that slice must not, at its next batch, seem to have written
// markers it failed.
func TestFinishLeavesTheStoresAnswersAlone(t *testing.T) {
	ctx := context.Background()
	s := newRecycledAnswers()
	g := testenv.NewGuard(t, s, &core.Config{DisableGroupCommit: true, StoreTimeout: 100 * time.Millisecond})
	work := func(keys ...string) []*core.Claim {
		jobs := make([]core.Job, len(keys))
		for i, k := range keys {
			jobs[i] = core.Job{Key: k}
		}
		claims := g.Claim(ctx, jobs...)
		for _, c := range claims {
			_, err := c.Work(ctx, func(context.Context) ([]byte, error) { return nil, nil })
			require.NoError(t, err)
		}
		return claims
	}

	// The batch fails; the markers' retries, one by one, are written.
	require.Equal(t, []core.Outcome{core.Ran, core.Ran}, g.Finish(ctx, work("a", "b")...))
	for i, err := range s.down {
		assert.ErrorIs(t, err, errBatchesDown, "Finish wrote into answer %d the store's Batch returned", i)
	}

	// Now nothing is written: no marker may be reported Ran.
	s.completesDown.Store(true)
	outs := g.Finish(ctx, work("c", "d")...)
	s.completesDown.Store(false)
	for i, key := range []string{"c", "d"} {
		if outs[i] != core.Ran {
			continue
		}
		out, err := g.Do(ctx, key, mustNotRun)
		require.Equal(t, core.Duplicate, out, "Finish reported %s Ran, but the store wrote no marker of it (a copy: %v)", key, err)
	}
	require.Equal(t, []core.Outcome{core.Unrecorded, core.Unrecorded}, outs)
}

// scribbledRequests is a BatchStore on memstore whose batches of done
// markers fail, and which then writes over the requests it was given (a
// store that reuses its input as scratch space: driver.BatchStore does not
// say it may not).
type scribbledRequests struct{ *memstore.Store }

func (s scribbledRequests) Batch(ctx context.Context, completes []driver.CompleteRequest, claims []driver.ClaimRequest) ([]driver.ClaimReply, []error, []error) {
	if len(completes) > 0 && len(claims) == 0 {
		errs := make([]error, len(completes))
		for i := range completes {
			completes[i] = driver.CompleteRequest{}
			errs[i] = errBatchesDown
		}
		return nil, nil, errs
	}
	return testenv.OneByOne(s.Store).Batch(ctx, completes, claims)
}

// TestFinishRetriesItsOwnRequests: a marker whose batch failed is retried
// with the claim's own request, not with the one the store was handed, so
// what the store did with that request cannot change the retry's outcome.
func TestFinishRetriesItsOwnRequests(t *testing.T) {
	ctx := context.Background()
	g := testenv.NewGuard(t, scribbledRequests{memstore.New()}, &core.Config{DisableGroupCommit: true, StoreTimeout: 100 * time.Millisecond})
	claims := g.Claim(ctx, core.Job{Key: "a"}, core.Job{Key: "b"})
	for _, c := range claims {
		_, err := c.Work(ctx, func(context.Context) ([]byte, error) { return nil, nil })
		require.NoError(t, err)
	}
	require.Equal(t, []core.Outcome{core.Ran, core.Ran}, g.Finish(ctx, claims...))
}
