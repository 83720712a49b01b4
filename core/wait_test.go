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

// hangingNotifier is a memstore whose Listener calls named in hang wait for
// their context to end (a subscription connection that cannot be made), and
// which counts its Await calls and the Listeners it opened and closed.
type hangingNotifier struct {
	*memstore.Store
	hang           map[string]bool // "Listen", "Add", "Remove"; "Refuse": Listen fails at once
	opened, closed atomic.Int32
	awaits         atomic.Int64
	listens        atomic.Int32
	notify         atomic.Pointer[func(string)] // the last Listener's
}

func (s *hangingNotifier) Await(ctx context.Context, req driver.ClaimRequest) (driver.ClaimReply, error) {
	s.awaits.Add(1)
	return s.Store.Await(ctx, req)
}

// forge notifies key as the last Listener opened would.
func (s *hangingNotifier) forge(key string) {
	if n := s.notify.Load(); n != nil {
		(*n)(key)
	}
}

func (s *hangingNotifier) Listen(ctx context.Context, notify func(string)) (driver.Listener, error) {
	s.listens.Add(1)
	if s.hang["Listen"] {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if s.hang["Refuse"] {
		return nil, errors.New("refused")
	}
	s.notify.Store(&notify)
	l, err := s.Store.Listen(ctx, notify)
	if err != nil {
		return nil, err
	}
	s.opened.Add(1)
	return &hangingListener{Listener: l, s: s}, nil
}

type hangingListener struct {
	driver.Listener
	s *hangingNotifier
}

func (l *hangingListener) Add(ctx context.Context, key string) error {
	if l.s.hang["Add"] {
		<-ctx.Done()
		return ctx.Err()
	}
	return l.Listener.Add(ctx, key)
}

func (l *hangingListener) Remove(ctx context.Context, key string) error {
	if l.s.hang["Remove"] {
		<-ctx.Done()
		return ctx.Err()
	}
	return l.Listener.Remove(ctx, key)
}

func (l *hangingListener) Close() error {
	l.s.closed.Add(1)
	return l.Listener.Close()
}

// TestWaitersAreAnsweredWithinTheirContextWhileTheListenerHangs: eight
// copies that find their jobs running wait with 100 ms contexts while the
// Listener's calls hang for their whole StoreTimeout (500 ms): each is
// answered with its context's error within its context and one
// StoreTimeout, not one after another, and once all have left the Listener
// is closed and no goroutine is left.
func TestWaitersAreAnsweredWithinTheirContextWhileTheListenerHangs(t *testing.T) {
	const (
		n       = 8
		within  = 100 * time.Millisecond
		timeout = 500 * time.Millisecond
		slack   = 300 * time.Millisecond
	)
	for _, hang := range [][]string{{"Add"}, {"Listen"}, {"Add", "Remove"}} {
		t.Run(fmt.Sprint(hang), func(t *testing.T) {
			baseline := runtime.NumGoroutine()
			st := &hangingNotifier{Store: memstore.New(), hang: map[string]bool{}}
			for _, h := range hang {
				st.hang[h] = true
			}
			g, err := core.New(st, &core.Config{StoreTimeout: timeout, WaitingShare: 1})
			require.NoError(t, err)

			release := make(chan struct{})
			var holders sync.WaitGroup
			for i := range n {
				started := make(chan struct{})
				holders.Go(func() {
					_, _ = g.Run(context.Background(), core.Job{Key: fmt.Sprint("k", i)}, func(context.Context) ([]byte, error) {
						close(started)
						<-release
						return nil, nil
					})
				})
				<-started
			}

			took := make([]time.Duration, n)
			errs := make([]error, n)
			probe := stall.Start()
			var waiters sync.WaitGroup
			for i := range n {
				waiters.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), within)
					defer cancel()
					start := time.Now()
					_, errs[i] = g.Run(ctx, core.Job{Key: fmt.Sprint("k", i), WaitUntil: time.Now().Add(20 * time.Second)},
						func(context.Context) ([]byte, error) { return nil, nil })
					end := time.Now()
					took[i] = end.Sub(start) - probe.Within(start, end)
				})
			}
			waiters.Wait()
			probe.Stop()
			close(release)
			holders.Wait()
			require.NoError(t, g.Close())

			for i := range n {
				require.ErrorIs(t, errs[i], context.DeadlineExceeded, "waiter %d", i)
				require.Less(t, took[i], within+timeout+slack, "waiter %d answered after %v, stalls excepted (all: %v)", i, took[i], took)
			}
			require.Equal(t, st.opened.Load(), st.closed.Load(), "Close closed every Listener opened, once nobody waits")
			deadline := time.Now().Add(5 * time.Second)
			for runtime.NumGoroutine() > baseline && time.Now().Before(deadline) {
				runtime.Gosched()
				time.Sleep(10 * time.Millisecond)
			}
			require.LessOrEqual(t, runtime.NumGoroutine(), baseline, "goroutines left after the waits")
		})
	}
}

// TestWaitersAreAnsweredByTheirWaitWhileTheListenerHangs: eight copies on
// eight keys, whose contexts never end, wait 100 ms (Job.WaitUntil) for
// their running copies while each Listener Add hangs for its whole
// StoreTimeout (500 ms): each is answered Running within its wait and one
// StoreTimeout (its own Add), not after the Adds of the copies before it,
// one after another (the last took eight StoreTimeouts).
func TestWaitersAreAnsweredByTheirWaitWhileTheListenerHangs(t *testing.T) {
	const (
		n       = 8
		wait    = 100 * time.Millisecond
		timeout = 500 * time.Millisecond
		slack   = 300 * time.Millisecond
	)
	st := &hangingNotifier{Store: memstore.New(), hang: map[string]bool{"Add": true}}
	g, err := core.New(st, &core.Config{StoreTimeout: timeout, WaitingShare: 1})
	require.NoError(t, err)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
	}
	release := make(chan struct{})
	holders := holdKeys(g, release, keys...)
	probe := stall.Start()
	took := make([]time.Duration, n)
	outs := make([]core.Outcome, n)
	var waiters sync.WaitGroup
	for i := range n {
		waiters.Go(func() {
			start := time.Now()
			res, _ := g.Run(context.Background(), core.Job{Key: keys[i], WaitUntil: start.Add(wait)},
				func(context.Context) ([]byte, error) { return nil, nil })
			end := time.Now()
			took[i], outs[i] = end.Sub(start)-probe.Within(start, end), res.Outcome
		})
	}
	waiters.Wait()
	probe.Stop()
	close(release)
	holders.Wait()
	require.NoError(t, g.Close())
	for i := range n {
		require.Equal(t, core.Running, outs[i], "copy %d", i)
		require.Less(t, took[i], wait+timeout+slack, "copy %d answered after %v, stalls excepted (all: %v)", i, took[i], took)
	}
}

// holdKeys runs, on g, a job on each of keys that blocks until release is
// closed, and returns once all run.
func holdKeys(g *core.Guard, release chan struct{}, keys ...string) *sync.WaitGroup {
	var holders sync.WaitGroup
	for _, key := range keys {
		started := make(chan struct{})
		holders.Go(func() {
			_, _ = g.Run(context.Background(), core.Job{Key: key}, func(context.Context) ([]byte, error) {
				close(started)
				<-release
				return nil, nil
			})
		})
		<-started
	}
	return &holders
}

// waitAll runs, on g, n copies of the jobs on keys (copy i on keys[i%len]),
// each waiting for its running copy, and returns their results once all
// returned; release is closed once they all wait (each read its key).
func waitAll(t *testing.T, g *core.Guard, st *hangingNotifier, n int, release chan struct{}, keys ...string) []core.Result {
	t.Helper()
	before := st.awaits.Load()
	var waiters sync.WaitGroup
	results := make([]core.Result, n)
	for i := range n {
		waiters.Go(func() {
			results[i], _ = g.Run(context.Background(), core.Job{Key: keys[i%len(keys)], WaitUntil: time.Now().Add(10 * time.Second), HoldsWorker: true},
				func(context.Context) ([]byte, error) { return nil, nil })
		})
	}
	require.Eventually(t, func() bool { return st.awaits.Load() >= before+int64(n) }, 10*time.Second, time.Millisecond, "the copies began to wait")
	close(release)
	waiters.Wait()
	return results
}

// TestListenerOutlivesTheLastWaiterUntilIdle: copies waiting on several
// keys share one Listener, which stays open when the last of them leaves,
// so that the next wait uses it without opening another, and closes once
// it has been idle for the Guard's idle time.
func TestListenerOutlivesTheLastWaiterUntilIdle(t *testing.T) {
	st := &hangingNotifier{Store: memstore.New(), hang: map[string]bool{}}
	g, err := core.New(st, &core.Config{StoreTimeout: time.Second})
	require.NoError(t, err)
	core.SetListenerIdle(g, 50*time.Millisecond)

	release := make(chan struct{})
	holders := holdKeys(g, release, "k0", "k1", "k2")
	for _, res := range waitAll(t, g, st, 6, release, "k0", "k1", "k2") {
		require.Equal(t, core.Duplicate, res.Outcome)
	}
	holders.Wait()
	require.EqualValues(t, 1, st.opened.Load(), "the waiting copies shared one Listener")
	require.Eventually(t, func() bool { return st.closed.Load() == 1 }, 10*time.Second, time.Millisecond,
		"the Listener closed once idle")

	release = make(chan struct{})
	holders = holdKeys(g, release, "k3")
	waitAll(t, g, st, 1, release, "k3")
	holders.Wait()
	require.EqualValues(t, 2, st.opened.Load(), "a wait after the Listener closed opens another")
	require.NoError(t, g.Close())
	require.EqualValues(t, 2, st.closed.Load())
}

// TestListenerStaysOpenBetweenWaitsUntilClose: with the default idle time,
// a wait after the last copy left reuses its Listener, Close closes it at
// once when nobody waits, and Close while a copy waits closes it as that
// copy leaves.
func TestListenerStaysOpenBetweenWaitsUntilClose(t *testing.T) {
	baseline := runtime.NumGoroutine()
	st := &hangingNotifier{Store: memstore.New(), hang: map[string]bool{}}
	g, err := core.New(st, &core.Config{StoreTimeout: time.Second})
	require.NoError(t, err)
	for i := range 3 {
		release := make(chan struct{})
		holders := holdKeys(g, release, fmt.Sprint("a", i))
		waitAll(t, g, st, 2, release, fmt.Sprint("a", i))
		holders.Wait()
	}
	require.EqualValues(t, 1, st.opened.Load(), "one Listener for waits one after another")
	require.Zero(t, st.closed.Load(), "kept open between waits")
	require.NoError(t, g.Close())
	require.EqualValues(t, 1, st.closed.Load(), "Close closed it at once")

	release := make(chan struct{})
	holders := holdKeys(g, release, "b")
	var waiters sync.WaitGroup
	before := st.awaits.Load()
	waiters.Go(func() {
		_, _ = g.Run(context.Background(), core.Job{Key: "b", WaitUntil: time.Now().Add(10 * time.Second)},
			func(context.Context) ([]byte, error) { return nil, nil })
	})
	require.Eventually(t, func() bool { return st.awaits.Load() > before }, 10*time.Second, time.Millisecond)
	require.NoError(t, g.Close())
	require.EqualValues(t, 1, st.closed.Load(), "not while a copy waits")
	close(release)
	waiters.Wait()
	holders.Wait()
	require.EqualValues(t, 2, st.opened.Load())
	require.EqualValues(t, 2, st.closed.Load(), "closed as the last copy left")
	requireGoroutines(t, baseline)
}

// requireGoroutines waits, for up to 5s, until no more than n goroutines
// run.
func requireGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > n && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	require.LessOrEqual(t, runtime.NumGoroutine(), n, "goroutines left")
}

// TestForgedNotificationsCostEachCopyBoundedReads: a copy waiting for a key
// whose notifications come without end (forged: any role may NOTIFY a
// PostgreSQL channel), and those of every key, reads the key notifyBurst
// times for each, then once per notifyEvery at most, and its outcome is the
// running copy's.
func TestForgedNotificationsCostEachCopyBoundedReads(t *testing.T) {
	st := &hangingNotifier{Store: memstore.New(), hang: map[string]bool{}}
	g, err := core.New(st, &core.Config{StoreTimeout: time.Second})
	require.NoError(t, err)
	release := make(chan struct{})
	holders := holdKeys(g, release, "forged")
	stored, err := g.StoredKey("forged")
	require.NoError(t, err)
	var waiters sync.WaitGroup
	var res core.Result
	waiters.Go(func() {
		res, _ = g.Run(context.Background(), core.Job{Key: "forged", WaitUntil: time.Now().Add(20 * time.Second)},
			func(context.Context) ([]byte, error) { return []byte("ran twice"), nil })
	})
	require.Eventually(t, func() bool { return st.awaits.Load() >= 1 }, 10*time.Second, time.Millisecond)
	start, before := time.Now(), st.awaits.Load()
	for st.awaits.Load() < before+20 && time.Since(start) < 500*time.Millisecond {
		st.forge(stored)
		st.forge("") // every key: as a Listener that connected again says
	}
	elapsed := time.Since(start)
	reads := st.awaits.Load() - before
	bound := 2*(int64(core.NotifyBurst)+1+int64(elapsed/core.NotifyEvery)) + int64(elapsed/time.Second)
	t.Logf("%d reads in %s of forged notifications (bound %d)", reads, elapsed.Round(time.Millisecond), bound)
	require.LessOrEqual(t, reads, bound)
	close(release)
	waiters.Wait()
	holders.Wait()
	require.Equal(t, core.Duplicate, res.Outcome, "a forged notification never changes an outcome")
	require.NoError(t, g.Close())
}

// TestListenerThatCannotOpenIsLoggedOnce: a store whose Listener cannot be
// opened is polled by the copies that wait, and the Guard says so at Warn
// once, not at each attempt to open it.
func TestListenerThatCannotOpenIsLoggedOnce(t *testing.T) {
	st := &hangingNotifier{Store: memstore.New(), hang: map[string]bool{"Refuse": true}}
	var warnings testenv.Warnings
	g, err := core.New(st, &core.Config{StoreTimeout: time.Second, Logger: warnings.Logger()})
	require.NoError(t, err)
	release := make(chan struct{})
	holders := holdKeys(g, release, "refused")
	for st.listens.Load() < 2 { // a second attempt comes a second after the first failed
		res, err := g.Run(context.Background(), core.Job{Key: "refused", WaitUntil: time.Now().Add(50 * time.Millisecond)},
			func(context.Context) ([]byte, error) { return nil, nil })
		require.ErrorIs(t, err, core.ErrRunning)
		require.Equal(t, core.Running, res.Outcome, "the copy polled until its wait ended")
	}
	close(release)
	holders.Wait()
	var said int
	for _, m := range warnings.Messages() {
		if strings.Contains(m, "could not listen") {
			said++
		}
	}
	require.Equal(t, 1, said, "%q", warnings.Messages())
}

// TestListenerOfAGuardGarbageCollectedCloses: a Guard dropped without Close
// leaves no Listener open once it is garbage collected.
func TestListenerOfAGuardGarbageCollectedCloses(t *testing.T) {
	st := &hangingNotifier{Store: memstore.New(), hang: map[string]bool{}}
	func() {
		g, err := core.New(st, &core.Config{StoreTimeout: time.Second})
		require.NoError(t, err)
		release := make(chan struct{})
		holders := holdKeys(g, release, "dropped")
		waitAll(t, g, st, 1, release, "dropped")
		holders.Wait()
	}()
	require.EqualValues(t, 1, st.opened.Load())
	require.Eventually(t, func() bool {
		runtime.GC()
		return st.closed.Load() == 1
	}, 10*time.Second, 10*time.Millisecond, "the Listener of the dropped Guard closed")
}

// panickyListener is a memstore whose Listener panics in Listen, or in Add:
// reached is closed once the panicking call is made.
type panickyListener struct {
	*memstore.Store
	inListen bool
	reached  chan struct{}
	once     sync.Once
}

func (s *panickyListener) Listen(ctx context.Context, notify func(string)) (driver.Listener, error) {
	if s.inListen {
		s.once.Do(func() { close(s.reached) })
		panic("Listen panicked")
	}
	l, err := s.Store.Listen(ctx, notify)
	return panickyAdd{l, s}, err
}

type panickyAdd struct {
	driver.Listener
	s *panickyListener
}

func (a panickyAdd) Add(context.Context, string) error {
	a.s.once.Do(func() { close(a.s.reached) })
	panic("Add panicked")
}

// A Listener call that panics is a store call that panics: the waiting copy
// that made it polls, as when Listen fails, and learns the running copy's
// outcome; nothing takes its goroutine down.
func TestListenerPanicIsAFailedListen(t *testing.T) {
	for _, inListen := range []bool{true, false} {
		t.Run(fmt.Sprint("inListen=", inListen), func(t *testing.T) {
			st := &panickyListener{Store: memstore.New(), inListen: inListen, reached: make(chan struct{})}
			g := testenv.NewGuard(t, st, nil)
			started := make(chan struct{})
			holder := make(chan core.Outcome, 1)
			go func() {
				out, _ := g.Do(context.Background(), "k", func(context.Context) error {
					close(started)
					<-st.reached // the waiting copy has made the call that panics
					return nil
				})
				holder <- out
			}()
			<-started
			var res core.Result
			require.NotPanics(t, func() {
				res, _ = g.Run(context.Background(), core.Job{Key: "k", WaitUntil: time.Now().Add(time.Minute)},
					func(context.Context) ([]byte, error) { return nil, errors.New("must not run") })
			})
			require.Equal(t, core.Ran, <-holder)
			require.Equal(t, core.Duplicate, res.Outcome)
		})
	}
}
