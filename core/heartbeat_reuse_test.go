package core

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core/driver"
)

// slowRenewal is a store that grants every claim and accepts every
// renewal and marker (enough for one job): the first Extend answers after
// sleeping late, ignoring its context; done markers wait for that answer.
type slowRenewal struct {
	late     time.Duration
	once     sync.Once
	answered chan struct{}
}

func (s *slowRenewal) Claim(context.Context, driver.ClaimRequest) (driver.ClaimReply, error) {
	return driver.ClaimReply{State: driver.StateClaimed, Fence: 1}, nil
}

func (s *slowRenewal) Extend(context.Context, string, driver.Token, time.Duration) error {
	first := false
	s.once.Do(func() { first = true })
	if first {
		time.Sleep(s.late)
		close(s.answered)
	}
	return nil
}

func (s *slowRenewal) Complete(context.Context, driver.CompleteRequest) error {
	<-s.answered
	time.Sleep(30 * time.Millisecond)
	return nil
}

func (s *slowRenewal) Release(context.Context, string, driver.Token) error { return nil }

// A heartbeat whose expiry function ran (its renewal answered past the
// lease's end) may go back to the pool and serve another job: the expiry
// function holds its own job's cancel, so it can never cancel the next job
// (TestLateRenewalDoesNotCancelTheNextJob checks the same under -race).
func TestHeartbeatWhoseExpiryFiredServesTheNextJob(t *testing.T) {
	// One P, so that the pool's Get finds what the Guard put (sync.Pool does
	// not steal another P's private item).
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const lease = 300 * time.Millisecond
	s := &slowRenewal{late: lease*2/3 + 50*time.Millisecond, answered: make(chan struct{})}
	g, err := New(s, &Config{Lease: lease, StoreTimeout: 2 * time.Second, PlainKeys: true})
	require.NoError(t, err)
	for { // empty the pool
		if h, _ := heartbeats.Get().(*heartbeat); h == nil {
			break
		}
	}
	var jobCtx context.Context
	out, err := g.Do(context.Background(), "first", func(ctx context.Context) error {
		jobCtx = ctx
		<-s.answered // the job ends once the late renewal answered
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, Ran, out)
	cause := context.Cause(jobCtx)
	require.ErrorIs(t, cause, ErrLeaseLost, "the expiry function ran: it cancelled the job's context")
	require.Contains(t, cause.Error(), "while its renewal was pending")

	second, err := g.Do(context.Background(), "second", func(ctx context.Context) error {
		time.Sleep(10 * time.Millisecond)
		return context.Cause(ctx) // the first job's expiry must not reach this job
	})
	require.NoError(t, err, "the second job's context was not cancelled")
	require.Equal(t, Ran, second)
}
