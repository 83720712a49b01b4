package core_test

import (
	"context"
	"sync"
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

// lateRenewal is a memstore whose first Extend renews the lease at once but
// answers late, past the end of the lease it renewed from (a slow reply that
// ignores its context), and whose done markers wait until that answer came.
type lateRenewal struct {
	*memstore.Store
	late     time.Duration
	once     sync.Once
	answered chan struct{}
}

func (s *lateRenewal) Extend(ctx context.Context, key string, token driver.Token, lease time.Duration) error {
	err := s.Store.Extend(context.WithoutCancel(ctx), key, token, lease)
	first := false
	s.once.Do(func() { first = true })
	if first {
		time.Sleep(s.late) // the reply comes after the heartbeat's deadline
		defer close(s.answered)
	}
	return err
}

func (s *lateRenewal) Complete(ctx context.Context, req driver.CompleteRequest) error {
	<-s.answered
	time.Sleep(30 * time.Millisecond) // the beat has ended and re-armed its timer
	return s.Store.Complete(ctx, req)
}

// A beat whose renewal answers after the lease's end lets its expiry timer
// fire, in a goroutine of its own; the beat then re-arms the timer, and the
// stop after the done marker puts the heartbeat back in the pool for another
// job. The expiry function holds its own job's cancel, so the next jobs that
// take the heartbeat from the pool are not cancelled though they hold their
// claims, and nothing panics on a timer goroutine.
//
// Run with -race: the race detector reports any unsynchronised access
// between the expiry function and heartbeat.stop.
func TestLateRenewalDoesNotCancelTheNextJob(t *testing.T) {
	const lease = 600 * time.Millisecond // room for a loaded machine: a next job is cancelled only if its heartbeat is late by 400ms
	s := &lateRenewal{Store: memstore.New(), late: lease*2/3 + 50*time.Millisecond, answered: make(chan struct{})}
	g, err := core.New(s, &core.Config{Lease: lease, StoreTimeout: 2 * time.Second})
	require.NoError(t, err)
	out, err := g.Do(context.Background(), "first", func(context.Context) error { return nil })
	require.NoError(t, err)
	// Its marker follows the late renewal by 30ms, 120ms before the lease
	// the renewal set runs out: a pause of the process past that finds the
	// lease gone, which is LeaseLost. The test is of the jobs after it.
	require.Contains(t, []core.Outcome{core.Ran, core.LeaseLost}, out)
	// The next jobs take the heartbeat from the pool.
	for range 3 {
		out, err = g.Do(context.Background(), "next", func(ctx context.Context) error {
			time.Sleep(lease / 2) // long enough for its own heartbeat to beat
			return context.Cause(ctx)
		})
		require.NoError(t, err, "a job that holds its claim is not cancelled")
		require.Contains(t, []core.Outcome{core.Ran, core.Duplicate}, out)
	}
}
