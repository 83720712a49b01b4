package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/internal/batchcall"
)

// fencesIncrease: successive claims of a key get strictly increasing
// fences, whatever ended the claim before: a release, a lease that lapsed
// (the next claim takes the key over), or a done marker whose retention ran
// out.
func fencesIncrease(t *testing.T, s *suite) {
	ctx, key := ctx(t), s.key("fences")
	tok := driver.NewToken()
	last := s.fence(s.store.Claim(ctx, claimReq(key, tok, "", time.Minute)))
	next := func(fence int64, after string) {
		t.Helper()
		require.Greater(t, fence, last, "the fence of a claim after %s", after)
		last = fence
	}
	for range 20 {
		require.NoError(t, s.store.Release(ctx, key, tok))
		tok = driver.NewToken()
		next(s.fence(s.store.Claim(ctx, claimReq(key, tok, "", time.Minute))), "a release")
	}

	require.NoError(t, s.store.Release(ctx, key, tok))
	next(s.fence(s.store.Claim(ctx, claimReq(key, driver.NewToken(), "", 30*time.Millisecond))), "a release")
	tok = driver.NewToken()
	next(s.claimWhenFree(ctx, claimReq(key, tok, "", time.Minute)).Fence, "a lapsed lease")

	require.NoError(t, s.store.Complete(ctx, driver.CompleteRequest{Key: key, Token: tok, Retention: 30 * time.Millisecond}))
	next(s.claimWhenFree(ctx, claimReq(key, driver.NewToken(), "", time.Minute)).Fence, "a retention that ran out")
}

// fencedEffects is a downstream store that applies a write only when its
// fence is greater than the fence of the last write it applied to the key
// ("UPDATE … WHERE fence < $fence"). It is safe for concurrent use.
type fencedEffects struct {
	mu    sync.Mutex
	last  map[string]int64
	value map[string]string
}

func newFencedEffects() *fencedEffects {
	return &fencedEffects{last: map[string]int64{}, value: map[string]string{}}
}

func (e *fencedEffects) write(key string, fence int64, value string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if fence <= e.last[key] {
		return false
	}
	e.last[key], e.value[key] = fence, value
	return true
}

// lapsedHolderFenced: a holder whose lease lapsed while it stalled writes
// to a fenced downstream store after the claim that took the key over did:
// its smaller fence makes the late write change nothing.
func lapsedHolderFenced(t *testing.T, s *suite) {
	ctx, key := ctx(t), s.key("lapsed-holder")
	effects := newFencedEffects()
	lapsed := s.fence(s.store.Claim(ctx, claimReq(key, driver.NewToken(), "", 30*time.Millisecond)))
	require.True(t, effects.write(key, lapsed, "written by the lapsed holder in time"))
	holder := s.claimWhenFree(ctx, claimReq(key, driver.NewToken(), "", time.Minute)).Fence
	require.Greater(t, holder, lapsed)
	require.True(t, effects.write(key, holder, "written by the holder"))
	require.False(t, effects.write(key, lapsed, "written late by the lapsed holder"), "the lapsed holder's write is refused")
	require.Equal(t, "written by the holder", effects.value[key])
}

// batchFences: a batch gives every claim its fence, the same one to a
// request sent again in the batch, and greater ones to the claims after a
// release.
func batchFences(t *testing.T, s *suite) {
	bs, ok := s.store.(driver.BatchStore)
	if !ok {
		t.Skip("store is not a driver.BatchStore")
	}
	ctx := ctx(t)
	a := claimReq(s.key("batch-fence-a"), driver.NewToken(), "", time.Minute)
	b := claimReq(s.key("batch-fence-b"), driver.NewToken(), "", time.Minute)
	replies, errs := batchcall.Claims(ctx, bs, []driver.ClaimRequest{a, b, a, claimReq(b.Key, driver.NewToken(), "", time.Minute)})
	require.Equal(t, make([]error, 4), errs)
	fa, fb := s.fence(replies[0], nil), s.fence(replies[1], nil)
	require.Equal(t, replies[0], replies[2], "a claim sent again in the batch gets the same fence")
	require.Equal(t, driver.StateRunning, replies[3].State)

	require.NoError(t, s.store.Release(ctx, a.Key, a.Token))
	require.NoError(t, s.store.Release(ctx, b.Key, b.Token))
	replies, errs = batchcall.Claims(ctx, bs, []driver.ClaimRequest{
		claimReq(a.Key, driver.NewToken(), "", time.Minute),
		claimReq(b.Key, driver.NewToken(), "", time.Minute),
	})
	require.Equal(t, make([]error, 2), errs)
	require.Greater(t, s.fence(replies[0], nil), fa)
	require.Greater(t, s.fence(replies[1], nil), fb)
}

// doneRemaining: a claim that finds a done marker reports the marker's
// remaining retention, through Claim and through Batch.
func doneRemaining(t *testing.T, s *suite) {
	ctx := ctx(t)
	for _, retention := range []time.Duration{20 * time.Second, time.Minute} {
		key, tok := s.key("done-remaining-"+retention.String()), driver.NewToken()
		s.fence(s.store.Claim(ctx, claimReq(key, tok, "", time.Minute)))
		require.NoError(t, s.store.Complete(ctx, driver.CompleteRequest{Key: key, Token: tok, Retention: retention}))
		replies := []driver.ClaimReply{}
		r, err := s.store.Claim(ctx, claimReq(key, driver.NewToken(), "", time.Minute))
		require.NoError(t, err)
		replies = append(replies, r)
		if bs, ok := s.store.(driver.BatchStore); ok {
			rs, errs := batchcall.Claims(ctx, bs, []driver.ClaimRequest{claimReq(key, driver.NewToken(), "", time.Minute)})
			require.NoError(t, errs[0])
			replies = append(replies, rs[0])
		}
		for _, r := range replies {
			require.Equal(t, driver.StateDone, r.State)
			require.Greater(t, r.Remaining, retention-5*time.Second, "the remaining retention of a marker kept for %s", retention)
			require.LessOrEqual(t, r.Remaining, retention)
		}
	}
}

// jobFencesIncrease: a job's function finds its claim's fence in its
// context, and the run of the same key after a failure released the claim
// finds a greater one.
func jobFencesIncrease(t *testing.T, s *suite) {
	g := s.guard(s.store, core.Config{})
	ctx := ctx(t)
	var fences []int64
	run := func(result error) func(context.Context) error {
		return func(ctx context.Context) error {
			if f, ok := core.Fence(ctx); ok {
				fences = append(fences, f)
			}
			return result
		}
	}
	failed := errors.New("the job failed")
	out, err := g.Do(ctx, "job", run(failed))
	require.ErrorIs(t, err, failed)
	require.Equal(t, core.Failed, out)
	out, err = g.Do(ctx, "job", run(nil))
	require.NoError(t, err)
	require.Equal(t, core.Ran, out)
	require.Len(t, fences, 2, "each run has its claim's fence")
	require.Greater(t, fences[1], fences[0])
}
