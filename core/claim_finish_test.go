package core_test

import (
	"context"
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
	answered := make(chan answer, 1)
	start := time.Now()
	go func() {
		out, err := g.Do(context.Background(), "k", func(ctx context.Context) error {
			<-ctx.Done() // the job honours its context: the lease's end cancels it
			return context.Cause(ctx)
		})
		answered <- answer{out, err}
	}()
	<-s.entered
	select {
	case a := <-answered:
		t.Logf("answered after %s: %s %v", time.Since(start), a.out, a.err)
	case <-time.After(2 * time.Second):
		t.Fatalf("Do not answered %s after it started (lease %s, StoreTimeout %s): the heartbeat's stop waits for the hung renewal",
			time.Since(start).Round(time.Millisecond), lease, storeTimeout)
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
	start := time.Now()
	outs := g.Finish(ctx, claims...)
	took := time.Since(start)
	for _, out := range outs {
		require.Equal(t, core.Unrecorded, out)
	}
	require.Less(t, took, 2*storeTimeout+storeTimeout, "Finish of %d claims took %s", len(claims), took)
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
