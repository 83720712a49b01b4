package core_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/memstore"
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
