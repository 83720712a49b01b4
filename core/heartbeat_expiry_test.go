package core_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/memstore"
)

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
	require.Equal(t, core.Ran, out)
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
