package core_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/memstore"
)

// awaitCounter is a memstore that counts its Await calls: a copy admitted
// to wait reads its key through Await, a copy refused never does.
type awaitCounter struct {
	*memstore.Store
	awaits atomic.Int32
}

func (s *awaitCounter) Await(ctx context.Context, req driver.ClaimRequest) (driver.ClaimReply, error) {
	s.awaits.Add(1)
	return s.Store.Await(ctx, req)
}

// holdKey runs a job of key that blocks until release is closed, and
// returns once it runs; done is closed when its Run returned.
func holdKey(t *testing.T, g *core.Guard, job core.Job) (release, done chan struct{}) {
	t.Helper()
	release, done = make(chan struct{}), make(chan struct{})
	started := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = g.Run(context.Background(), job, func(context.Context) ([]byte, error) {
			close(started)
			<-release
			return nil, nil
		})
	}()
	<-started
	return release, done
}

type copyResult struct {
	res core.Result
	err error
}

// startCopy runs a copy of job that may wait a minute for its running copy.
func startCopy(g *core.Guard, job core.Job) <-chan copyResult {
	ch := make(chan copyResult, 1)
	go func() {
		job.WaitUntil = time.Now().Add(time.Minute)
		res, err := g.Run(context.Background(), job, func(context.Context) ([]byte, error) {
			return nil, errors.New("a copy must not run while its job runs")
		})
		ch <- copyResult{res, err}
	}()
	return ch
}

// refused returns the result of a copy that must not wait, failing the
// test when it is still waiting after 10 s.
func refused(t *testing.T, ch <-chan copyResult, i int) copyResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatalf("copy %d is still waiting for its running copy, holding its caller", i)
		return copyResult{}
	}
}

// awaitAwaits waits until the store has seen n Await calls.
func awaitAwaits(t *testing.T, s *awaitCounter, n int32) {
	t.Helper()
	require.Eventually(t, func() bool { return s.awaits.Load() >= n }, 30*time.Second, time.Millisecond,
		"a copy admitted to wait reads its key (%d of %d Await calls)", s.awaits.Load(), n)
}

// TestOneCopyOfAKeyWaits: while one copy of a running job waits for it,
// four more copies of the same job report Running at once, with a retry
// hint, rather than take four more worker slots; the copy that waited is
// a Duplicate once the job is done.
func TestOneCopyOfAKeyWaits(t *testing.T) {
	st := &awaitCounter{Store: memstore.New()}
	g, err := core.New(st, nil)
	require.NoError(t, err)
	job := core.Job{Key: "hot"}
	release, done := holdKey(t, g, job)

	waiter := startCopy(g, job)
	awaitAwaits(t, st, 1)
	for i := range 4 {
		r := refused(t, startCopy(g, job), i)
		require.Equal(t, core.Running, r.res.Outcome, "copy %d", i)
		after, ok := core.RetryAfter(r.err)
		require.True(t, ok, "copy %d: %v", i, r.err)
		require.Positive(t, after)
	}
	select {
	case r := <-waiter:
		t.Fatalf("the waiting copy returned %s (%v) while its job ran", r.res.Outcome, r.err)
	default:
	}
	close(release)
	<-done
	r := <-waiter
	require.NoError(t, r.err)
	require.Equal(t, core.Duplicate, r.res.Outcome)
}

// TestWaitingCopiesTakeAShareOfTheCallsInProgress: with eight jobs
// running, copies of each arrive one after another; with WaitingShare
// 0.25, the first two wait (a quarter of the ten calls in progress once
// they do) and the other six report Running at once.
func TestWaitingCopiesTakeAShareOfTheCallsInProgress(t *testing.T) {
	st := &awaitCounter{Store: memstore.New()}
	g, err := core.New(st, &core.Config{WaitingShare: 0.25})
	require.NoError(t, err)
	const n = 8
	var releases, dones [n]chan struct{}
	for i := range n {
		releases[i], dones[i] = holdKey(t, g, core.Job{Key: fmt.Sprint("k", i)})
	}
	var waiters []<-chan copyResult
	for i := range n {
		ch := startCopy(g, core.Job{Key: fmt.Sprint("k", i)})
		if i < 2 {
			awaitAwaits(t, st, int32(i+1))
			waiters = append(waiters, ch)
			continue
		}
		r := refused(t, ch, i)
		require.Equal(t, core.Running, r.res.Outcome, "copy %d", i)
		require.ErrorIs(t, r.err, core.ErrRunning)
	}
	for i := range n {
		close(releases[i])
		<-dones[i]
	}
	for i, ch := range waiters {
		r := <-ch
		require.NoError(t, r.err, "waiter %d", i)
		require.Equal(t, core.Duplicate, r.res.Outcome, "waiter %d", i)
	}
}

// TestRunningCopyIsRetriedWhenItIsExpectedToEnd: once the Guard has seen a
// kind's runs take about 100 ms, a copy that finds a job of that kind
// running is told to come back about when it should end, not after the
// running claim's remaining lease (a minute here, bounded by MaxRetryAfter,
// 20 s).
func TestRunningCopyIsRetriedWhenItIsExpectedToEnd(t *testing.T) {
	g, err := core.New(memstore.New(), &core.Config{Lease: time.Minute})
	require.NoError(t, err)
	ctx := context.Background()
	for i := range 5 {
		_, err := g.Run(ctx, core.Job{Key: fmt.Sprint("warm", i), Kind: "report"}, func(context.Context) ([]byte, error) {
			time.Sleep(100 * time.Millisecond) // the job's duration
			return nil, nil
		})
		require.NoError(t, err)
	}
	job := core.Job{Key: "slow", Kind: "report"}
	release, done := holdKey(t, g, job)
	defer func() { close(release); <-done }()
	res, err := g.Run(ctx, job, func(context.Context) ([]byte, error) { return nil, nil })
	require.Equal(t, core.Running, res.Outcome)
	after, ok := core.RetryAfter(err)
	require.True(t, ok)
	require.Less(t, after, 10*time.Second, "the hint follows the kind's runs, not the lease")

	res, err = g.Run(ctx, core.Job{Key: "slow", Kind: "other"}, func(context.Context) ([]byte, error) { return nil, nil })
	require.Equal(t, core.Running, res.Outcome)
	after, _ = core.RetryAfter(err)
	require.Equal(t, 20*time.Second, after, "a kind not seen yet is told the remaining lease, up to MaxRetryAfter")
}

// TestWaitingShareIsChecked: a share outside [0, 1] is refused by name.
func TestWaitingShareIsChecked(t *testing.T) {
	for _, share := range []float64{-0.1, 1.5} {
		_, err := core.New(memstore.New(), &core.Config{WaitingShare: share})
		require.ErrorContains(t, err, "Config.WaitingShare")
	}
}

// TestACopyThatHoldsItsWorkerWaitsPastTheLimits: a copy whose caller holds
// its worker anyway (Job.HoldsWorker) waits though another copy of its key
// waits already, and is a Duplicate once the job is done.
func TestACopyThatHoldsItsWorkerWaitsPastTheLimits(t *testing.T) {
	st := &awaitCounter{Store: memstore.New()}
	g, err := core.New(st, nil)
	require.NoError(t, err)
	job := core.Job{Key: "hot"}
	release, done := holdKey(t, g, job)
	first := startCopy(g, job)
	awaitAwaits(t, st, 1)
	held := job
	held.HoldsWorker = true
	second := startCopy(g, held)
	awaitAwaits(t, st, 2)
	close(release)
	<-done
	for _, ch := range []<-chan copyResult{first, second} {
		r := <-ch
		require.NoError(t, r.err)
		require.Equal(t, core.Duplicate, r.res.Outcome)
	}
}

// TestOverdueRunningCopyIsAskedAfterSoon: a copy that finds its job running
// past its kind's usual time (runs of about a millisecond) is told to come
// back as long again as the job is overdue (here MinRetryAfter), not after
// the running claim's remaining lease (MaxRetryAfter, 20 s).
func TestOverdueRunningCopyIsAskedAfterSoon(t *testing.T) {
	g, err := core.New(memstore.New(), &core.Config{Lease: time.Minute})
	require.NoError(t, err)
	ctx := context.Background()
	for i := range 5 {
		_, err := g.Run(ctx, core.Job{Key: fmt.Sprint("quick", i), Kind: "ping"}, func(context.Context) ([]byte, error) { return nil, nil })
		require.NoError(t, err)
	}
	job := core.Job{Key: "stuck", Kind: "ping"}
	release, done := holdKey(t, g, job)
	defer func() { close(release); <-done }()
	res, err := g.Run(ctx, job, func(context.Context) ([]byte, error) { return nil, nil })
	require.Equal(t, core.Running, res.Outcome)
	after, ok := core.RetryAfter(err)
	require.True(t, ok)
	require.Less(t, after, 10*time.Second, "an overdue job is asked after as long again as it is overdue")
}

// cutAwaits is a memstore whose Await, once cut is set, claims as asked
// and then loses its answer until the caller's context ends (a reply lost
// after the write applied, a client that ends the call with its context);
// cutDone is closed when it did.
type cutAwaits struct {
	*memstore.Store
	cut     atomic.Bool
	cutDone chan struct{}
	awaits  atomic.Int32
}

func (s *cutAwaits) Await(ctx context.Context, req driver.ClaimRequest) (driver.ClaimReply, error) {
	s.awaits.Add(1)
	r, err := s.Store.Await(ctx, req)
	if err != nil || r.State != driver.StateClaimed || !s.cut.CompareAndSwap(true, false) {
		return r, err
	}
	close(s.cutDone)
	<-ctx.Done()
	return driver.ClaimReply{}, ctx.Err()
}

// TestWaitingCopyStoppedWhileItsReadClaimsLeavesTheKeyFree: a copy whose
// running copy failed claims the key as it reads it again, and its caller's
// context ends before the answer comes: the copy is Canceled and the claim
// the store wrote for it is released, so the next delivery runs the job at
// once instead of finding it running for a whole lease (a holder that
// stopped renewing, counted stale).
func TestWaitingCopyStoppedWhileItsReadClaimsLeavesTheKeyFree(t *testing.T) {
	st := &cutAwaits{Store: memstore.New(), cutDone: make(chan struct{})}
	g, err := core.New(st, &core.Config{Lease: time.Minute})
	require.NoError(t, err)
	defer g.Close()
	failing := make(chan struct{})
	running := make(chan struct{})
	go func() {
		_, _ = g.Run(context.Background(), core.Job{Key: "k"}, func(context.Context) ([]byte, error) {
			close(running)
			<-failing
			return nil, errors.New("failed")
		})
	}()
	<-running
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	copied := make(chan copyResult, 1)
	go func() {
		res, err := g.Run(ctx, core.Job{Key: "k", WaitUntil: time.Now().Add(time.Minute)}, func(context.Context) ([]byte, error) {
			return nil, errors.New("a copy whose caller ended must not run")
		})
		copied <- copyResult{res, err}
	}()
	require.Eventually(t, func() bool { return st.awaits.Load() > 0 }, 10*time.Second, time.Millisecond, "the copy waits")
	st.cut.Store(true)
	close(failing)
	<-st.cutDone
	cancel()
	r := <-copied
	require.Equal(t, core.Canceled, r.res.Outcome)
	require.ErrorIs(t, r.err, context.Canceled)

	ran := false
	res, err := g.Run(context.Background(), core.Job{Key: "k"}, func(context.Context) ([]byte, error) { ran = true; return nil, nil })
	require.NoError(t, err, "the key is free: nobody holds it")
	require.Equal(t, core.Ran, res.Outcome)
	require.True(t, ran)
}
