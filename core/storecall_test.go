package core_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// gated is a BatchStore over memstore whose calls for chosen keys wait for
// a gate, and signal on entry. Calls for keys in dead ignore their context
// (a dead connection); the others give up when it ends.
type gated struct {
	*memstore.Store
	mu      sync.Mutex
	claims  map[string]chan struct{} // stored key → gate of Claim
	marks   map[string]chan struct{} // stored key → gate of Complete
	dead    map[string]bool
	entered chan string
}

func newGated() *gated {
	return &gated{Store: memstore.New(), claims: map[string]chan struct{}{}, marks: map[string]chan struct{}{},
		dead: map[string]bool{}, entered: make(chan string, 16)}
}

func (s *gated) gate(ctx context.Context, m map[string]chan struct{}, key string) error {
	s.mu.Lock()
	g, dead := m[key], s.dead[key]
	s.mu.Unlock()
	if g == nil {
		return nil
	}
	s.entered <- key
	if dead {
		<-g
		return nil
	}
	select {
	case <-g:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *gated) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimReply, error) {
	if err := s.gate(ctx, s.claims, req.Key); err != nil {
		return driver.ClaimReply{}, err
	}
	return s.Store.Claim(context.WithoutCancel(ctx), req)
}

func (s *gated) Complete(ctx context.Context, req driver.CompleteRequest) error {
	if err := s.gate(ctx, s.marks, req.Key); err != nil {
		return err
	}
	return s.Store.Complete(context.WithoutCancel(ctx), req)
}

func (s *gated) Batch(ctx context.Context, completes []driver.CompleteRequest, claims []driver.ClaimRequest) ([]driver.ClaimReply, []error, []error) {
	return testenv.OneByOne(s).Batch(ctx, completes, claims)
}

type outcomes struct {
	mu   sync.Mutex
	seen []core.Outcome
}

func (o *outcomes) observe(_ context.Context, e core.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen = append(o.seen, e.Outcome)
}

func (o *outcomes) list() []core.Outcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]core.Outcome(nil), o.seen...)
}

func gatedGuard(t *testing.T, s *gated, cfg core.Config) *core.Guard {
	t.Helper()
	g, err := core.New(s, &cfg)
	require.NoError(t, err)
	return g
}

func (s *gated) close(g *core.Guard, m map[string]chan struct{}, key string, dead bool) (release func()) {
	k, _ := g.StoredKey(key)
	ch := make(chan struct{})
	s.mu.Lock()
	m[k], s.dead[k] = ch, dead
	s.mu.Unlock()
	return sync.OnceFunc(func() { close(ch) })
}

func mustNotRun(context.Context) error { return errors.New("the job ran") }

// A claim stopped by the caller's context reports that context's error, not
// a store outage, and never runs the job, even with FailOpen.
func TestCallerCancellationIsNotAnOutage(t *testing.T) {
	s := newGated()
	var seen outcomes
	g := gatedGuard(t, s, core.Config{FailOpen: true, Observer: seen.observe, StoreTimeout: 5 * time.Second})

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	out, err := g.Do(cancelled, "a", mustNotRun)
	require.Equal(t, core.Canceled, out)
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, core.ErrStoreUnavailable)

	// The store hangs; the caller's deadline ends the claim.
	release := s.close(g, s.claims, "b", false)
	defer release()
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	out, err = g.Do(short, "b", mustNotRun)
	require.Equal(t, core.Canceled, out)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, core.ErrStoreUnavailable)
	require.Less(t, time.Since(start), time.Second)

	require.Equal(t, []core.Outcome{core.Canceled, core.Canceled}, seen.list(), "never Unavailable or Unguarded")
}

// A claim the store granted after the caller's context ended is released,
// so the next copy runs at once.
func TestClaimGrantedAfterCancellationIsReleased(t *testing.T) {
	s := newGated()
	g := gatedGuard(t, s, core.Config{Lease: time.Hour, Retention: 2 * time.Hour})
	release := s.close(g, s.claims, "a", true)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-s.entered; cancel(); release() }()
	out, err := g.Do(ctx, "a", mustNotRun)
	require.Equal(t, core.Canceled, out)
	require.ErrorIs(t, err, context.Canceled)

	s.mu.Lock()
	clear(s.claims)
	s.mu.Unlock()
	out, err = g.Do(context.Background(), "a", func(context.Context) error { return nil })
	require.NoError(t, err)
	require.Equal(t, core.Ran, out, "not held for the hour-long lease")
}

// A store that does not answer is an outage only once StoreTimeout passed,
// and a claim is bounded by it even under a context without a deadline.
func TestHungClaimIsBoundedByStoreTimeout(t *testing.T) {
	for _, grouped := range []bool{true, false} {
		s := newGated()
		g := gatedGuard(t, s, core.Config{StoreTimeout: 100 * time.Millisecond, DisableGroupCommit: !grouped})
		// Hung calls fill every round trip the group commit has in flight.
		var wg sync.WaitGroup
		var releases []func()
		for i := range core.GroupRoundTrips {
			key := fmt.Sprint("stuck-", i)
			releases = append(releases, s.close(g, s.claims, key, true))
			wg.Go(func() {
				_, _ = g.Do(context.Background(), key, mustNotRun) // its store call ignores its context
			})
			<-s.entered
		}

		short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		start := time.Now()
		var ran atomic.Bool
		out, err := g.Do(short, "other", func(context.Context) error { ran.Store(true); return nil })
		cancel()
		if grouped {
			require.Equal(t, core.Canceled, out, "queued behind the hung call, answered within its own deadline")
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.False(t, ran.Load())
		} else {
			require.NoError(t, err)
			require.Equal(t, core.Ran, out)
		}
		require.Less(t, time.Since(start), time.Second)

		start = time.Now()
		out, err = g.Do(context.Background(), "third", func(context.Context) error { return nil })
		require.NoError(t, err, "the store is healthy for this key")
		require.Equal(t, core.Ran, out)
		require.Less(t, time.Since(start), 2*time.Second, "within two StoreTimeouts (200ms) and slack for a loaded machine")
		for _, release := range releases {
			release()
		}
		wg.Wait()
	}
}

// A done marker that waits behind slow round trips keeps its claim alive:
// no other copy runs the job meanwhile, and the first copy ends Ran.
func TestClaimStaysAliveUntilItsMarkerIsWritten(t *testing.T) {
	const lease = 900 * time.Millisecond
	s := newGated()
	g := gatedGuard(t, s, core.Config{Lease: lease, StoreTimeout: 10 * time.Second})
	// Another process's Guard on the same store, to look at the key.
	probe := gatedGuard(t, s, core.Config{Lease: lease, StoreTimeout: 10 * time.Second})
	var releases []func()
	slow := make(chan core.Outcome, core.GroupRoundTrips)
	hang := func(key string) { // key's done marker is in flight, and hangs
		releases = append(releases, s.close(g, s.marks, key, true))
		go func() {
			out, _ := g.Do(context.Background(), key, func(context.Context) error { return nil })
			slow <- out
		}()
		require.Equal(t, mustStored(t, g, key), <-s.entered)
	}
	defer func() {
		for _, r := range releases {
			r()
		}
	}()
	for i := range core.GroupRoundTrips - 1 {
		hang(fmt.Sprint("slow-", i))
	}

	var runs atomic.Int32
	returned := make(chan struct{})
	first := make(chan core.Outcome, 1)
	go func() {
		out, _ := g.Do(context.Background(), "b", func(context.Context) error {
			runs.Add(1)
			hang("slow-last") // every round trip of g is now in flight, and hangs
			close(returned)
			return nil
		})
		first <- out
	}()
	<-returned
	// b's marker waits behind the slow ones. Time passes well beyond b's lease.
	for deadline := time.Now().Add(2 * lease); time.Now().Before(deadline); time.Sleep(lease / 6) {
		out, err := probe.Do(context.Background(), "b", func(context.Context) error { runs.Add(1); return nil })
		require.Equal(t, core.Running, out, "b's claim is alive while its marker waits")
		require.ErrorIs(t, err, core.ErrRunning)
	}
	for _, r := range releases {
		r()
	}
	require.Equal(t, core.Ran, <-first)
	for range core.GroupRoundTrips {
		require.Equal(t, core.Ran, <-slow)
	}
	require.EqualValues(t, 1, runs.Load())
	out, err := probe.Do(context.Background(), "b", func(context.Context) error { runs.Add(1); return nil })
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, out)
}

func mustStored(t *testing.T, g *core.Guard, key string) string {
	t.Helper()
	k, err := g.StoredKey(key)
	require.NoError(t, err)
	return k
}

// One round trip of the group commit that hangs holds up no other call: the
// next claims and done markers share the other round trip in flight.
func TestOneHungRoundTripHoldsNobodyUp(t *testing.T) {
	s := newGated()
	g := gatedGuard(t, s, core.Config{StoreTimeout: time.Hour})
	release := s.close(g, s.marks, "stuck", true)
	stuck := make(chan core.Outcome, 1)
	go func() {
		out, _ := g.Do(context.Background(), "stuck", func(context.Context) error { return nil })
		stuck <- out
	}()
	<-s.entered // its done marker hangs, and would for an hour
	for i := range 20 {
		out, err := g.Do(context.Background(), fmt.Sprint("free-", i), func(context.Context) error { return nil })
		require.NoError(t, err)
		require.Equal(t, core.Ran, out)
	}
	release()
	require.Equal(t, core.Ran, <-stuck)
}
