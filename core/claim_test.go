package core_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/internal/stall"
	"github.com/jobonce/jobonce/internal/testenv"
)

// hangingExtend is a memstore whose Extend calls block, ignoring their
// context, until released (a dead connection).
type hangingExtend struct {
	*memstore.Store
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *hangingExtend) Extend(ctx context.Context, key string, token driver.Token, lease time.Duration) error {
	s.once.Do(func() { close(s.entered) })
	<-s.release
	return s.Store.Extend(context.WithoutCancel(ctx), key, token, lease)
}

// A renewal that ignores its context must not keep the caller waiting: the
// lease's end cancels the job, and the caller is answered within its own
// context plus one bounded store call (invariant 3).
func TestHungRenewalDoesNotHoldTheCaller(t *testing.T) {
	const lease = 150 * time.Millisecond
	const storeTimeout = 50 * time.Millisecond
	s := &hangingExtend{Store: memstore.New(), entered: make(chan struct{}), release: make(chan struct{})}
	defer close(s.release)
	g, err := core.New(s, &core.Config{Lease: lease, StoreTimeout: storeTimeout})
	require.NoError(t, err)

	type answer struct {
		out core.Outcome
		err error
	}
	for attempt := 1; ; attempt++ {
		answered := make(chan answer, 1)
		start := time.Now()
		go func() {
			out, err := g.Do(context.Background(), fmt.Sprintf("k%d", attempt), func(ctx context.Context) error {
				<-ctx.Done() // the job honours its context: the lease's end cancels it
				return context.Cause(ctx)
			})
			answered <- answer{out, err}
		}()
		select {
		case <-s.entered:
		case a := <-answered:
			// The lease ended before its first renewal was due: the process
			// was held up past half of it. Only a renewal sent tests this.
			require.Less(t, attempt, 5, "no attempt reached a renewal; the last was answered %s %v", a.out, a.err)
			continue
		}
		select {
		case a := <-answered:
			t.Logf("answered after %s: %s %v", time.Since(start), a.out, a.err)
		case <-time.After(2 * time.Second):
			t.Fatalf("Do not answered %s after it started (lease %s, StoreTimeout %s): the heartbeat's stop waits for the hung renewal",
				time.Since(start).Round(time.Millisecond), lease, storeTimeout)
		}
		return
	}
}

// A Claim runs its job once: working it a second time, while its marker
// awaits Finish or after it was written, is Rejected and runs nothing
// (invariant 1); Finish still records the first run.
func TestClaimRunsItsJobOnce(t *testing.T) {
	for _, finishFirst := range []bool{true, false} {
		g, err := core.New(memstore.New(), nil)
		require.NoError(t, err)
		ctx := context.Background()
		c := g.Claim(ctx, core.Job{Key: "k"})[0]
		var runs atomic.Int32
		fn := func(context.Context) ([]byte, error) { runs.Add(1); return nil, nil }

		res, err := c.Work(ctx, fn)
		require.NoError(t, err)
		require.Equal(t, core.Ran, res.Outcome)
		if finishFirst {
			require.Equal(t, []core.Outcome{core.Ran}, g.Finish(ctx, c))
		}
		res, err = c.Work(ctx, fn)
		require.Equal(t, core.Rejected, res.Outcome, "finished first: %t", finishFirst)
		require.Error(t, err)
		require.Equal(t, []core.Outcome{core.Ran}, g.Finish(ctx, c))
		require.EqualValues(t, 1, runs.Load(), "finished first: %t", finishFirst)
	}
}

// failingComplete is a memstore whose Complete calls hang until their
// context ends (a store that honours its context but does not answer).
type failingComplete struct{ *memstore.Store }

func (s failingComplete) Complete(ctx context.Context, _ driver.CompleteRequest) error {
	<-ctx.Done()
	return ctx.Err()
}

// A caller whose context ends while its done marker is written is answered
// within one StoreTimeout, retries included, not one per retry (invariant 3).
func TestCompleteRetriesShareOneStoreTimeout(t *testing.T) {
	const storeTimeout = 300 * time.Millisecond
	g, err := core.New(failingComplete{memstore.New()}, &core.Config{StoreTimeout: storeTimeout})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var ended time.Time
	out, err := g.Do(ctx, "k", func(context.Context) error {
		cancel() // the caller gives up as the job ends
		ended = time.Now()
		return nil
	})
	waited := time.Since(ended)
	t.Logf("outcome %s err %v; answered %s after the caller's context ended", out, err, waited.Round(time.Millisecond))
	require.Less(t, waited, 2*storeTimeout, "answered within its own context plus one bounded store call")
}

// A claim listed twice in one Finish is finished once and reported at each
// place, never as the zero Outcome.
func TestFinishOfARepeatedClaim(t *testing.T) {
	g, err := core.New(memstore.New(), nil)
	require.NoError(t, err)
	ctx := context.Background()
	for _, n := range []int{1, 2} { // one claim alone, and one in a batch
		jobs := make([]core.Job, n)
		for i := range jobs {
			jobs[i] = core.Job{Key: fmt.Sprintf("repeat-%d-%d", n, i)}
		}
		claims := g.Claim(ctx, jobs...)
		for _, c := range claims {
			_, err := c.Work(ctx, func(context.Context) ([]byte, error) { return nil, nil })
			require.NoError(t, err)
		}
		outs := g.Finish(ctx, append(claims, claims[0])...)
		for i, out := range outs {
			require.Equal(t, core.Ran, out, "entry %d of %d", i, len(outs))
		}
	}
}

// runtime.Goexit in an unguarded job (FailOpen, or Job.Unguarded) ends the
// job's goroutine as it would without jobonce, reported as Failed, rather
// than turning into a panic.
func TestGoexitInUnguardedJob(t *testing.T) {
	var outs testenv.Outcomes
	g, err := core.New(memstore.New(), &core.Config{Observer: outs.Observe})
	require.NoError(t, err)
	done := make(chan any, 1)
	go func() {
		defer func() { done <- recover() }()
		_, _ = g.Run(context.Background(), core.Job{Key: "k", Unguarded: true}, func(context.Context) ([]byte, error) {
			runtime.Goexit()
			return nil, nil
		})
	}()
	require.Nil(t, <-done, "Goexit became a panic")
	require.EqualValues(t, 1, outs.Get(core.Failed))
}

// A Claim that does not come from Guard.Claim is rejected, not a panic.
func TestZeroClaimIsRejected(t *testing.T) {
	var c core.Claim
	require.False(t, c.Runs())
	res, err := c.Work(context.Background(), func(context.Context) ([]byte, error) { return nil, nil })
	require.Error(t, err)
	require.Equal(t, core.Rejected, res.Outcome)
	var nilClaim *core.Claim
	require.False(t, nilClaim.Runs())
	res, err = nilClaim.Work(context.Background(), func(context.Context) ([]byte, error) { return nil, nil })
	require.Error(t, err)
	require.Equal(t, core.Rejected, res.Outcome)
}

// Finish answers within two store calls' bound however many claims it is
// given: the markers' retries share one StoreTimeout.
func TestFinishIsBoundedWhateverTheBatch(t *testing.T) {
	const storeTimeout = 100 * time.Millisecond
	store := oneSlowMarker{memstore.New()}
	g, err := core.New(store, &core.Config{StoreTimeout: storeTimeout, PlainKeys: true})
	require.NoError(t, err)
	ctx := context.Background()
	jobs := make([]core.Job, 8)
	for i := range jobs {
		jobs[i] = core.Job{Key: fmt.Sprint("slow-", i)}
	}
	claims := g.Claim(ctx, jobs...)
	for _, c := range claims {
		_, err := c.Work(ctx, func(context.Context) ([]byte, error) { return nil, nil })
		require.NoError(t, err)
	}
	stalls := stall.Bound(t)
	start := time.Now()
	outs := g.Finish(ctx, claims...)
	stalls.RequireWithin(t, start, 2*storeTimeout+storeTimeout, "Finish of %d claims", len(claims))
	for _, out := range outs {
		require.Equal(t, core.Unrecorded, out)
	}
}

// oneSlowMarker is a store whose done markers for keys containing "slow"
// hang until their context ends.
type oneSlowMarker struct{ *memstore.Store }

func (s oneSlowMarker) Complete(ctx context.Context, req driver.CompleteRequest) error {
	if strings.Contains(req.Key, "slow") {
		<-ctx.Done()
		return ctx.Err()
	}
	return s.Store.Complete(ctx, req)
}

// One marker that hangs in Finish leaves the others their time: they are
// written (Ran), only the slow one is Unrecorded.
func TestFinishOneSlowMarkerSparesTheOthers(t *testing.T) {
	g, err := core.New(oneSlowMarker{memstore.New()}, &core.Config{StoreTimeout: 100 * time.Millisecond, PlainKeys: true})
	require.NoError(t, err)
	ctx := context.Background()
	claims := g.Claim(ctx, core.Job{Key: "slow"}, core.Job{Key: "fast"})
	for _, c := range claims {
		_, err := c.Work(ctx, func(context.Context) ([]byte, error) { return nil, nil })
		require.NoError(t, err)
	}
	require.Equal(t, []core.Outcome{core.Unrecorded, core.Ran}, g.Finish(ctx, claims...))
}

// lateClaims answers every claim late (after delay), and ends the caller's
// context (cancel) when a claim is released, counting the releases.
type lateClaims struct {
	*memstore.Store
	delay    time.Duration
	cancel   context.CancelFunc
	releases atomic.Int32
}

func (s *lateClaims) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimReply, error) {
	r, err := s.Store.Claim(ctx, req)
	time.Sleep(s.delay) // the late answer itself, not a synchronisation
	return r, err
}

func (s *lateClaims) Release(ctx context.Context, key string, token driver.Token) error {
	s.releases.Add(1)
	s.cancel()
	return s.Store.Release(ctx, key, token)
}

// TestClaimAnsweredLateIsReleasedOnce: a claim answered past half its lease
// runs nothing and is released; when the caller's context ends during that
// release, the outcome is Canceled, and the claim is released once, not
// again as a cancelled claim.
func TestClaimAnsweredLateIsReleasedOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &lateClaims{Store: memstore.New(), delay: 60 * time.Millisecond, cancel: cancel}
	g := testenv.NewGuard(t, s, &core.Config{Lease: 100 * time.Millisecond})
	out, err := g.Do(ctx, "late", func(context.Context) error {
		t.Error("a claim answered past half its lease ran its job")
		return nil
	})
	require.Equal(t, core.Canceled, out)
	require.ErrorIs(t, err, context.Canceled)
	require.EqualValues(t, 1, s.releases.Load(), "releases of the late claim")
}

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
