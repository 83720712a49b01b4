package core_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/internal/testenv"
)

// scriptedStore answers claims with its replies in turn, repeating the
// last; its other calls succeed.
type scriptedStore struct {
	mu      sync.Mutex
	replies []driver.ClaimReply
}

func (s *scriptedStore) Claim(context.Context, driver.ClaimRequest) (driver.ClaimReply, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.replies[0]
	if len(s.replies) > 1 {
		s.replies = s.replies[1:]
	}
	return r, nil
}

func (s *scriptedStore) Extend(context.Context, string, driver.Token, time.Duration) error {
	return nil
}
func (s *scriptedStore) Complete(context.Context, driver.CompleteRequest) error { return nil }
func (s *scriptedStore) Release(context.Context, string, driver.Token) error    { return nil }

// TestStaleClaimsCounted: a copy that finds its job's claim not renewed
// for two heartbeat periods (under a third of Lease left) is counted in
// jobonce.claims.stale by the outcome it then had, also when it waited
// and took the key over; a claim renewed on time, or a key held by a
// transaction (no fence), is not.
func TestStaleClaimsCounted(t *testing.T) {
	const lease = 30 * time.Second
	running := func(left time.Duration, fence int64) driver.ClaimReply {
		return driver.ClaimReply{State: driver.StateRunning, Remaining: left, Fence: fence}
	}
	for _, tc := range []struct {
		name    string
		replies []driver.ClaimReply
		wait    bool
		want    map[string]int64
	}{
		{"stale", []driver.ClaimReply{running(lease/10, 1)}, false, map[string]int64{"running": 1}},
		{"renewed", []driver.ClaimReply{running(lease*2/3, 1)}, false, map[string]int64{}},
		{"transaction", []driver.ClaimReply{running(lease/10, 0)}, false, map[string]int64{}},
		{"taken over", []driver.ClaimReply{running(lease/10, 1), {State: driver.StateClaimed, Fence: 2}}, true, map[string]int64{"ran": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mp, reader := meterReader()
			g := testenv.NewGuard(t, &scriptedStore{replies: tc.replies}, &core.Config{Lease: lease, MeterProvider: mp})
			job := core.Job{Key: "k"}
			if tc.wait {
				job.WaitUntil = time.Now().Add(time.Minute)
			}
			_, _ = g.Run(context.Background(), job, func(context.Context) ([]byte, error) { return nil, nil })
			require.Equal(t, tc.want, counts(t, reader, "jobonce.claims.stale", "outcome"))
		})
	}
}

// lapsingStore holds its key for another claim until until; it reports
// that claim's remaining lease as running out at expires (a release ends
// it earlier), then lets the key be claimed.
type lapsingStore struct {
	scriptedStore
	until, expires time.Time
}

func (s *lapsingStore) Claim(context.Context, driver.ClaimRequest) (driver.ClaimReply, error) {
	if now := time.Now(); now.Before(s.until) {
		return driver.ClaimReply{State: driver.StateRunning, Remaining: s.expires.Sub(now), Fence: 1}, nil
	}
	return driver.ClaimReply{State: driver.StateClaimed, Fence: 2}, nil
}

// TestTakeoverAfterLapseCountedStale: a copy that waits for a running
// claim and claims the key once that claim's lease ran out took over a
// claim its holder stopped renewing, and is counted stale; one that claims
// it after a release, before the lease ran out, is not. (The copies'
// heartbeat is off, so a claim with little lease left is no sign.)
func TestTakeoverAfterLapseCountedStale(t *testing.T) {
	for _, tc := range []struct {
		name           string
		until, expires time.Duration
		want           map[string]int64
	}{
		{"lapsed", 50 * time.Millisecond, 50 * time.Millisecond, map[string]int64{"ran": 1}},
		{"released", 30 * time.Millisecond, time.Hour, map[string]int64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mp, reader := meterReader()
			now := time.Now()
			store := &lapsingStore{until: now.Add(tc.until), expires: now.Add(tc.expires)}
			g := testenv.NewGuard(t, store, &core.Config{DisableHeartbeat: true, MeterProvider: mp})
			res, err := g.Run(context.Background(), core.Job{Key: "k", WaitUntil: time.Now().Add(time.Minute)},
				func(context.Context) ([]byte, error) { return nil, nil })
			require.NoError(t, err)
			require.Equal(t, core.Ran, res.Outcome)
			require.Equal(t, tc.want, counts(t, reader, "jobonce.claims.stale", "outcome"))
		})
	}
}
