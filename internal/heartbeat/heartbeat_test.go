package heartbeat

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core/driver"
)

// slowRenewal renews every lease; the first renewal answers after sleeping
// late, ignoring its context.
type slowRenewal struct {
	late     time.Duration
	once     sync.Once
	answered chan struct{}
}

func (s *slowRenewal) extend(context.Context, string, driver.Token, time.Duration) error {
	first := false
	s.once.Do(func() { first = true })
	if first {
		time.Sleep(s.late)
		close(s.answered)
	}
	return nil
}

// A heartbeat whose expiry function ran (its renewal answered past the
// lease's end) may go back to the pool and serve another job: the expiry
// function holds its own job's cancel, so it can never cancel the next job
// (core's TestLateRenewalDoesNotCancelTheNextJob checks the same under
// -race).
func TestHeartbeatWhoseExpiryFiredServesTheNextJob(t *testing.T) {
	// One P, so that the pool's Get finds what Stop put (sync.Pool does
	// not steal another P's private item).
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const lease = 300 * time.Millisecond
	s := &slowRenewal{late: lease*2/3 + 50*time.Millisecond, answered: make(chan struct{})}
	cfg := &Config{Extend: s.extend, Lease: lease, Timeout: 2 * time.Second}
	for { // empty the pool
		if h, _ := heartbeats.Get().(*Heartbeat); h == nil {
			break
		}
	}
	first, cancelFirst := context.WithCancelCause(context.Background())
	defer cancelFirst(nil)
	h := Start(first, cfg, "first", driver.NewToken(), time.Now(), cancelFirst)
	<-s.answered                      // the job ends once the late renewal answered
	time.Sleep(30 * time.Millisecond) // its done marker's write, not a synchronisation
	h.Stop()
	cause := context.Cause(first)
	require.ErrorIs(t, cause, driver.ErrLeaseLost, "the expiry function ran: it cancelled the job's context")
	require.Contains(t, cause.Error(), "while its renewal was pending")

	second, cancelSecond := context.WithCancelCause(context.Background())
	defer cancelSecond(nil)
	h = Start(second, cfg, "second", driver.NewToken(), time.Now(), cancelSecond)
	time.Sleep(10 * time.Millisecond)
	h.Stop()
	require.NoError(t, context.Cause(second), "the first job's expiry must not reach this job")
}

// A nil Config starts no heartbeat, and its Stop does nothing.
func TestNilConfigStartsNoHeartbeat(t *testing.T) {
	h := Start(context.Background(), nil, "k", driver.NewToken(), time.Now(), func(error) {})
	require.Nil(t, h)
	h.Stop()
}
