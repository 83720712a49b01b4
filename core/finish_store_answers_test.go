package core_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

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
