package storetest

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
)

// The cases of a copy that waits for its running copy (core.Job.WaitUntil):
// woken by the store's completion signal on a store that notifies
// (driver.Notifier), by its own polls on one that does not. The first check
// that a waiting copy makes without a signal comes a second after it began
// to wait: a copy settled sooner than that was woken by the signal.
const signalled = 900 * time.Millisecond

// holder runs a job under key on g until release is closed, then ends it
// with err; started is closed once the job runs, or once Run returned
// without running it.
type holder struct {
	started, release chan struct{}
	done             chan struct{}
	res              core.Result
	err              error
	at               time.Time // when Run returned
}

func hold(ctx context.Context, g *core.Guard, job core.Job, err error) *holder {
	h := &holder{started: make(chan struct{}), release: make(chan struct{}), done: make(chan struct{})}
	var once sync.Once
	start := func() { once.Do(func() { close(h.started) }) }
	go func() {
		defer close(h.done)
		h.res, h.err = g.Run(ctx, job, func(context.Context) ([]byte, error) {
			start()
			<-h.release
			return []byte("held"), err
		})
		h.at = time.Now()
		start() // a job that did not run (a store that failed) holds nothing: the case fails, not hangs
	}()
	return h
}

// waitFor returns once the probe has seen n Await calls: a copy waiting
// reads its key with Await once listening has begun.
func waitFor(t *testing.T, p *probe, n int64) {
	t.Helper()
	require.Eventually(t, func() bool { return p.awaits.Load() >= n }, 10*time.Second, time.Millisecond, "the copy did not start waiting")
}

// requireClosed closes g and checks that its Listener is closed: once no
// copy waits, Guard.Close closes it at once.
func requireClosed(t *testing.T, g *core.Guard, p *probe) {
	t.Helper()
	require.NoError(t, g.Close())
	require.Zero(t, p.open.Load(), "Guard.Close closed the Listener")
}

type waited struct {
	res core.Result
	err error
	at  time.Time
	ran bool
}

// waitCopy runs a copy of job with WaitUntil set to within from now, in a
// goroutine; its answer comes on the channel.
func waitCopy(ctx context.Context, g *core.Guard, job core.Job, within time.Duration) <-chan waited {
	ch := make(chan waited, 1)
	job.WaitUntil = time.Now().Add(within)
	go func() {
		var w waited
		w.res, w.err = g.Run(ctx, job, func(context.Context) ([]byte, error) {
			w.ran = true
			return []byte("second"), nil
		})
		w.at = time.Now()
		ch <- w
	}()
	return ch
}

func waitWokenByDoneMarker(t *testing.T, s *suite) {
	p := newProbe(t, s.store)
	var waits []time.Duration
	var mu sync.Mutex
	g := s.guard(p.store(), core.Config{Lease: time.Minute, Observer: func(_ context.Context, e core.Event) {
		if e.Outcome == core.Duplicate {
			mu.Lock()
			waits = append(waits, e.Waited)
			mu.Unlock()
		}
	}})
	ctx := ctx(t)
	job := core.Job{Key: "done-wakes", Kind: "k"}
	h := hold(ctx, g, job, nil)
	<-h.started
	start := time.Now()
	second := waitCopy(ctx, g, job, 30*time.Second)
	waitFor(t, p, 1)
	close(h.release)
	<-h.done
	require.NoError(t, h.err)
	require.Equal(t, core.Ran, h.res.Outcome)
	w := <-second
	require.NoError(t, w.err)
	require.Equal(t, core.Duplicate, w.res.Outcome, "the waiting copy is a duplicate of the copy that ran")
	require.Equal(t, []byte("held"), w.res.Value, "with its stored result")
	require.False(t, w.ran)
	require.Less(t, w.at.Sub(h.at), p.settleBound(start, h.at), "the done marker's signal (or the next poll) woke the waiting copy")
	require.Len(t, waits, 1)
	require.Positive(t, waits[0], "Event.Waited says how long it waited")
	requireClosed(t, g, p)
}

func waitWokenByRelease(t *testing.T, s *suite) {
	p := newProbe(t, s.store)
	g := s.guard(p.store(), core.Config{Lease: time.Minute})
	t.Cleanup(func() { _ = g.Close() })
	ctx := ctx(t)
	job := core.Job{Key: "release-wakes"}
	boom := errors.New("boom")
	h := hold(ctx, g, job, boom)
	<-h.started
	start := time.Now()
	second := waitCopy(ctx, g, job, 30*time.Second)
	waitFor(t, p, 1)
	close(h.release)
	<-h.done
	require.ErrorIs(t, h.err, boom)
	require.Equal(t, core.Failed, h.res.Outcome)
	w := <-second
	require.NoError(t, w.err)
	require.Equal(t, core.Ran, w.res.Outcome, "the released key is claimed by the waiting copy, which runs the job")
	require.True(t, w.ran)
	require.Less(t, w.at.Sub(h.at), p.settleBound(start, h.at), "the release's signal (or the next poll) woke the waiting copy")
	res, err := g.Run(ctx, job, func(context.Context) ([]byte, error) { return nil, errors.New("must not run") })
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, res.Outcome)
}

func waitEndsRunning(t *testing.T, s *suite) {
	p := newProbe(t, s.store)
	g := s.guard(p.store(), core.Config{Lease: time.Minute, MaxRetryAfter: 10 * time.Second})
	t.Cleanup(func() { _ = g.Close() })
	ctx := ctx(t)
	job := core.Job{Key: "still-running"}
	h := hold(ctx, g, job, nil)
	<-h.started
	start := time.Now()
	w := <-waitCopy(ctx, g, job, 300*time.Millisecond)
	require.Equal(t, core.Running, w.res.Outcome, "a copy still running when the wait ends goes back to its caller")
	require.ErrorIs(t, w.err, core.ErrRunning)
	retry, ok := core.RetryAfter(w.err)
	require.True(t, ok)
	require.Greater(t, retry, time.Second, "with the running claim's remaining lease, bounded")
	require.GreaterOrEqual(t, w.at.Sub(start), 300*time.Millisecond, "after waiting until WaitUntil")
	require.False(t, w.ran)
	close(h.release)
	<-h.done
	require.Equal(t, core.Ran, h.res.Outcome)
	requireClosed(t, g, p)
}

func waitCanceled(t *testing.T, s *suite) {
	p := newProbe(t, s.store)
	g := s.guard(p.store(), core.Config{Lease: time.Minute})
	t.Cleanup(func() { _ = g.Close() })
	ctx := ctx(t)
	job := core.Job{Key: "cancel-wait"}
	h := hold(ctx, g, job, nil)
	defer func() { close(h.release); <-h.done }()
	<-h.started
	wctx, cancel := context.WithCancel(ctx)
	second := waitCopy(wctx, g, job, 30*time.Second)
	waitFor(t, p, 1)
	cancel()
	select {
	case w := <-second:
		require.Equal(t, core.Canceled, w.res.Outcome)
		require.ErrorIs(t, w.err, context.Canceled, "the caller's cancellation, not a store outage")
		require.NotErrorIs(t, w.err, core.ErrStoreUnavailable)
		require.False(t, w.ran)
	case <-time.After(5 * time.Second):
		t.Fatal("a cancelled waiting copy did not return")
	}
	requireClosed(t, g, p)
}

func waitSettlesWithoutSignal(t *testing.T, s *suite) {
	p := newProbe(t, s.store)
	p.drop.Store(true)
	g := s.guard(p.store(), core.Config{Lease: time.Minute})
	t.Cleanup(func() { _ = g.Close() })
	ctx := ctx(t)
	job := core.Job{Key: "signal-lost"}
	h := hold(ctx, g, job, nil)
	<-h.started
	start := time.Now()
	second := waitCopy(ctx, g, job, 3*time.Second)
	waitFor(t, p, 1)
	close(h.release)
	<-h.done
	w := <-second
	require.NoError(t, w.err)
	require.Equal(t, core.Duplicate, w.res.Outcome, "a lost signal costs latency, never the outcome")
	require.Less(t, w.at.Sub(start), 3*time.Second, "settled by the copy's own deadline")
}

func waitSkippedForALongKind(t *testing.T, s *suite) {
	p := newProbe(t, s.store)
	g := s.guard(p.store(), core.Config{Lease: time.Minute})
	t.Cleanup(func() { _ = g.Close() })
	ctx := ctx(t)
	// Five runs of 500ms: the kind's 90th percentile.
	var wg sync.WaitGroup
	errs := make([]error, 5)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = g.Run(ctx, core.Job{Key: "slow-" + strconv.Itoa(i), Kind: "slow"}, func(context.Context) ([]byte, error) {
				time.Sleep(500 * time.Millisecond) // the job's own duration
				return nil, nil
			})
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	job := core.Job{Key: "slow-held", Kind: "slow"}
	h := hold(ctx, g, job, nil)
	defer func() { close(h.release); <-h.done }()
	<-h.started
	w := <-waitCopy(ctx, g, job, 200*time.Millisecond)
	require.Equal(t, core.Running, w.res.Outcome, "a copy of a kind expected to run past WaitUntil goes back at once")
	require.Zero(t, p.awaits.Load(), "without waiting to read the key again")

	other := hold(ctx, g, core.Job{Key: "new-kind", Kind: "new"}, nil)
	defer func() { close(other.release); <-other.done }()
	<-other.started
	w = <-waitCopy(ctx, g, core.Job{Key: "new-kind", Kind: "new"}, 500*time.Millisecond)
	require.Equal(t, core.Running, w.res.Outcome)
	require.Positive(t, p.awaits.Load(), "a kind this Guard has not seen run waits")
}

func waitFailsClosed(t *testing.T, s *suite) {
	p := newProbe(t, s.store)
	g := s.guard(p.store(), core.Config{Lease: time.Minute, FailOpen: true})
	t.Cleanup(func() { _ = g.Close() })
	ctx := ctx(t)
	job := core.Job{Key: "fail-closed"}
	h := hold(ctx, g, job, nil)
	defer func() { close(h.release); <-h.done }()
	<-h.started
	p.failAwait.Store(true)
	w := <-waitCopy(ctx, g, job, 30*time.Second)
	require.Equal(t, core.Unavailable, w.res.Outcome, "a copy that saw its job running never runs it unguarded")
	require.ErrorIs(t, w.err, core.ErrStoreUnavailable)
	require.False(t, w.ran)
}

func waitWithClaims(t *testing.T, s *suite) {
	p := newProbe(t, s.store)
	g := s.guard(p.store(), core.Config{Lease: time.Minute})
	t.Cleanup(func() { _ = g.Close() })
	ctx := ctx(t)
	job := core.Job{Key: "claims-wait"}
	h := hold(ctx, g, job, nil)
	<-h.started
	job.WaitUntil = time.Now().Add(30 * time.Second)
	claims := g.Claim(ctx, job, core.Job{Key: "claims-free"})
	require.True(t, claims[0].Runs(), "a claim that may wait is one to run on a goroutine of its own")
	var res core.Result
	var err error
	worked := make(chan struct{})
	go func() {
		defer close(worked)
		res, err = claims[0].Work(ctx, func(context.Context) ([]byte, error) { return nil, errors.New("must not run") })
	}()
	waitFor(t, p, 1)
	close(h.release)
	<-h.done
	<-worked
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, res.Outcome)
	_, err = claims[1].Work(ctx, func(context.Context) ([]byte, error) { return nil, nil })
	require.NoError(t, err)
	require.Equal(t, []core.Outcome{core.Duplicate, core.Ran}, g.Finish(ctx, claims...))
}

func waitersShareOneListener(t *testing.T, s *suite) {
	p := newProbe(t, s.store)
	g := s.guard(p.store(), core.Config{Lease: time.Minute, WaitingShare: 1})
	t.Cleanup(func() { _ = g.Close() })
	ctx := ctx(t)
	const n = 8
	holders := make([]*holder, n)
	seconds := make([]<-chan waited, n)
	for i := range n {
		job := core.Job{Key: "share-" + strconv.Itoa(i)}
		holders[i] = hold(ctx, g, job, nil)
		<-holders[i].started
		seconds[i] = waitCopy(ctx, g, job, 30*time.Second)
	}
	waitFor(t, p, n)
	require.EqualValues(t, p.listeners(), p.listens.Load(), "copies waiting on many keys share one Listener (none without a signal)")
	require.EqualValues(t, p.listeners(), p.open.Load())
	var dups atomic.Int32
	for i := range n {
		close(holders[i].release)
		<-holders[i].done
		if w := <-seconds[i]; w.res.Outcome == core.Duplicate && w.err == nil {
			dups.Add(1)
		}
	}
	require.EqualValues(t, n, dups.Load())
	require.EqualValues(t, p.listeners(), p.open.Load(), "the Listener stays open for the next wait")
	next := hold(ctx, g, core.Job{Key: "share-next"}, nil)
	<-next.started
	third := waitCopy(ctx, g, core.Job{Key: "share-next"}, 30*time.Second)
	waitFor(t, p, n+1)
	close(next.release)
	<-next.done
	require.Equal(t, core.Duplicate, (<-third).res.Outcome)
	require.EqualValues(t, p.listeners(), p.listens.Load(), "a wait after the others reuses their Listener")
	requireClosed(t, g, p)
}

func shadowDoesNotWait(t *testing.T, s *suite) {
	p := newProbe(t, s.store)
	g := s.guard(p.store(), core.Config{Lease: time.Minute, Shadow: true})
	t.Cleanup(func() { _ = g.Close() })
	ctx := ctx(t)
	job := core.Job{Key: "shadow"}
	h := hold(ctx, g, job, nil)
	defer func() { close(h.release); <-h.done }()
	<-h.started
	w := <-waitCopy(ctx, g, job, 30*time.Second)
	require.Equal(t, core.Unguarded, w.res.Outcome, "shadow mode runs the copy as it did")
	require.True(t, w.ran)
	require.Zero(t, p.awaits.Load())
}
