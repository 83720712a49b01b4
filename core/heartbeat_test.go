package core_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/internal/stall"
)

// hungRenewal is a memstore whose renewals never answer before their
// context ends.
type hungRenewal struct{ *memstore.Store }

func (hungRenewal) Extend(ctx context.Context, _ string, _ driver.Token, _ time.Duration) error {
	<-ctx.Done()
	return ctx.Err()
}

// A job whose renewal hangs is told to stop while the store still holds its
// claim (a margin before the lease runs out), so a copy that claims the key
// the moment the store lets the lease lapse never starts beside it. The
// margin is 12 ms of a 1 s lease: a process held up longer than that between
// the expiry timer and the question to the store sees the lease lapsed for
// want of time to run, so the store's view is asked only of a run the
// process was not held up in, and otherwise when the job was told is
// judged by the time the process ran.
func TestJobIsToldToStopBeforeItsLeaseLapses(t *testing.T) {
	const lease = time.Second
	s := hungRenewal{memstore.New()}
	g, err := core.New(s, &core.Config{Lease: lease, StoreTimeout: 2 * lease, PlainKeys: true})
	require.NoError(t, err)
	stalls := stall.Bound(t)
	var began, told time.Time
	var probe driver.ClaimReply
	out, err := g.Do(context.Background(), "k", func(ctx context.Context) error {
		began = time.Now()
		<-ctx.Done()
		told = time.Now()
		// The store is asked at once who holds the key.
		probe, err = s.Claim(context.Background(), driver.ClaimRequest{Key: "jobonce:k", Token: driver.NewToken(), Lease: lease})
		require.NoError(t, err)
		return context.Cause(ctx)
	})
	require.ErrorIs(t, err, core.ErrLeaseLost)
	require.Equal(t, core.Failed, out)
	stalled := stalls.Within(began, time.Now())
	require.Less(t, told.Sub(began)-stalls.Within(began, told), lease, "the job was told to stop after its lease, stalls excepted")
	if stalled == 0 {
		require.Equal(t, driver.StateRunning, probe.State, "the job was told to stop only after its lease had lapsed in the store")
	}
}

// extendCounter is a memstore that counts the renewals it was sent.
type extendCounter struct {
	*memstore.Store
	extends atomic.Int32
}

func (s *extendCounter) Extend(ctx context.Context, key string, token driver.Token, lease time.Duration) error {
	s.extends.Add(1)
	return s.Store.Extend(ctx, key, token, lease)
}

// TestHeartbeatRenewsEveryThirdOfTheLease: a job that runs 2 s under a
// 600 ms lease is renewed every 200 ms, about nine times, keeps its claim
// and is recorded. A heartbeat that beat once a lease would renew it about
// three times and let it lapse between beats.
func TestHeartbeatRenewsEveryThirdOfTheLease(t *testing.T) {
	st := &extendCounter{Store: memstore.New()}
	g, err := core.New(st, &core.Config{Lease: 600 * time.Millisecond})
	require.NoError(t, err)
	res, err := g.Run(context.Background(), core.Job{Key: "long"}, func(ctx context.Context) ([]byte, error) {
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(2 * time.Second): // the job's own duration
			return nil, nil
		}
	})
	require.NoError(t, err)
	require.Equal(t, core.Ran, res.Outcome)
	require.GreaterOrEqual(t, st.extends.Load(), int32(6), "renewals of a 2s job under a 600ms lease")
}
