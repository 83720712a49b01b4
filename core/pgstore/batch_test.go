package pgstore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/pgstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// loseFirstBatchAnswer runs the first batch with done markers in full and
// then loses its answer, as a connection that broke after the commit would.
type loseFirstBatchAnswer struct {
	*pgstore.Store
	lost      atomic.Bool
	completes atomic.Int32
}

func (l *loseFirstBatchAnswer) Batch(ctx context.Context, completes []driver.CompleteRequest, claims []driver.ClaimRequest) ([]driver.ClaimReply, []error, []error) {
	replies, claimErrs, completeErrs := l.Store.Batch(ctx, completes, claims)
	if len(completes) > 0 && l.lost.CompareAndSwap(false, true) {
		lost := errors.New("unexpected EOF")
		for i := range completeErrs {
			completeErrs[i] = lost
		}
		for i := range claimErrs {
			replies[i], claimErrs[i] = driver.ClaimReply{}, lost
		}
	}
	return replies, claimErrs, completeErrs
}

func (l *loseFirstBatchAnswer) Complete(ctx context.Context, req driver.CompleteRequest) error {
	l.completes.Add(1)
	return l.Store.Complete(ctx, req)
}

// A batch whose done markers committed but whose answer was lost is sent
// again: each marker finds the row its own claim wrote, so the jobs report
// Ran, with no warning, and their redeliveries are Duplicates with the
// stored results.
func TestBatchSentAgainAfterItsAnswerWasLostIsRan(t *testing.T) {
	s, _ := newStore(t, nil)
	store := &loseFirstBatchAnswer{Store: s}
	var warned testenv.Warnings
	g, err := core.New(store, &core.Config{Logger: warned.Logger()})
	require.NoError(t, err)
	ctx := ctxT(t)
	jobs := []core.Job{{Key: testenv.RandomID(8)}, {Key: testenv.RandomID(8)}}
	claims := g.Claim(ctx, jobs...)
	for i, c := range claims {
		require.True(t, c.Runs())
		_, err := c.Work(ctx, func(context.Context) ([]byte, error) { return []byte(jobs[i].Key), nil })
		require.NoError(t, err)
	}
	require.Equal(t, []core.Outcome{core.Ran, core.Ran}, g.Finish(ctx, claims...))
	require.True(t, store.lost.Load(), "the batch's answer was lost")
	require.Positive(t, store.completes.Load(), "the markers were sent again")
	require.Empty(t, warned.Messages())

	for _, job := range jobs {
		res, err := g.Run(ctx, job, func(context.Context) ([]byte, error) { return nil, errors.New("must not run") })
		require.NoError(t, err)
		require.Equal(t, core.Duplicate, res.Outcome)
		require.Equal(t, []byte(job.Key), res.Value)
	}
}
