package storetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
)

// runGuard runs the Guard's behavioural cases on top of the store.
func runGuard(t *testing.T, newStore NewStore) {
	cases := []struct {
		name string
		fn   func(t *testing.T, s *suite)
	}{
		{"ConcurrentCopiesRunOnce", concurrentCopiesRunOnce},
		{"FailureReleasesAtOnce", failureReleasesAtOnce},
		{"PanicReleasesAndRepanics", panicReleasesAndRepanics},
		{"RunningGetsBoundedRetryAfter", runningGetsBoundedRetryAfter},
		{"DuplicateGetsStoredResult", duplicateGetsStoredResult},
		{"ResultOverMaxResultSizeIsNotStored", resultOverMaxResultSizeIsNotStored},
		{"ConflictOnOtherPayload", conflictOnOtherPayload},
		{"HeartbeatKeepsLongJobExclusive", heartbeatKeepsLongJobExclusive},
		{"LostHeartbeatCancelsJob", lostHeartbeatCancelsJob},
		{"ExpiredLeaseLetsLaterCopyRun", expiredLeaseLetsLaterCopyRun},
		{"FailClosedAndFailOpen", failClosedAndFailOpen},
		{"UnrecordedWhenCompleteFails", unrecordedWhenCompleteFails},
		{"BadInput", badInput},
		{"Enqueue", enqueue},
		{"ClaimWorkFinish", claimWorkFinish},
		{"LongFingerprints", longFingerprints},
		{"PlainKeysKeepEnqueueApart", plainKeysKeepEnqueueApart},
		{"JobFencesIncrease", jobFencesIncrease},
		{"FenceRefusesAZombie", fenceRefusesAZombie},
		{"DuplicateReportsItsLag", duplicateReportsItsLag},
		{"WaitWokenByDoneMarker", waitWokenByDoneMarker},
		{"WaitWokenByRelease", waitWokenByRelease},
		{"WaitEndsRunning", waitEndsRunning},
		{"WaitCanceled", waitCanceled},
		{"WaitSettlesWithoutSignal", waitSettlesWithoutSignal},
		{"WaitSkippedForALongKind", waitSkippedForALongKind},
		{"WaitFailsClosed", waitFailsClosed},
		{"WaitWithClaims", waitWithClaims},
		{"WaitersShareOneListener", waitersShareOneListener},
		{"ShadowDoesNotWait", shadowDoesNotWait},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, newSuite(t, newStore))
		})
	}
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func (s *suite) guard(store driver.Store, cfg core.Config) *core.Guard {
	s.t.Helper()
	cfg.KeyPrefix = s.prefix
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	g, err := core.New(store, &cfg)
	require.NoError(s.t, err)
	s.t.Cleanup(func() { _ = g.Close() })
	return g
}

func concurrentCopiesRunOnce(t *testing.T, s *suite) {
	g := s.guard(s.store, core.Config{Lease: 10 * time.Second})
	ctx := ctx(t)
	const copies = 64
	var runs atomic.Int32
	outcomes := make([]core.Outcome, copies)
	errs := make([]error, copies)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range copies {
		wg.Go(func() {
			<-start
			outcomes[i], errs[i] = g.Do(ctx, "job", func(context.Context) error {
				runs.Add(1)
				return nil
			})
		})
	}
	close(start)
	wg.Wait()
	require.EqualValues(t, 1, runs.Load(), "64 racing copies ran the job more than once")
	counts := map[core.Outcome]int{}
	for i := range copies {
		counts[outcomes[i]]++
		switch outcomes[i] {
		case core.Ran, core.Duplicate:
			require.NoError(t, errs[i])
		case core.Running:
			require.ErrorIs(t, errs[i], core.ErrRunning)
		default:
			t.Fatalf("copy %d: unexpected outcome %s (%v)", i, outcomes[i], errs[i])
		}
	}
	require.Equal(t, 1, counts[core.Ran])
	out, err := g.Do(ctx, "job", func(context.Context) error { return errors.New("must not run") })
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, out)
}

func failureReleasesAtOnce(t *testing.T, s *suite) {
	g := s.guard(s.store, core.Config{Lease: time.Minute})
	ctx := ctx(t)
	boom := errors.New("boom")
	out, err := g.Do(ctx, "fail", func(context.Context) error { return boom })
	require.Equal(t, core.Failed, out)
	require.Same(t, boom, err, "the job's error comes back unchanged")
	ran := false
	out, err = g.Do(ctx, "fail", func(context.Context) error { ran = true; return nil })
	require.NoError(t, err)
	require.Equal(t, core.Ran, out, "a failed job's claim is released at once, not after its lease")
	require.True(t, ran)
}

func panicReleasesAndRepanics(t *testing.T, s *suite) {
	g := s.guard(s.store, core.Config{Lease: time.Minute})
	ctx := ctx(t)
	var events []core.Outcome
	g2 := s.guard(s.store, core.Config{Lease: time.Minute, Observer: func(_ context.Context, e core.Event) { events = append(events, e.Outcome) }})
	func() {
		defer func() { require.Equal(t, "kaboom", recover()) }()
		_, _ = g2.Do(ctx, "panic", func(context.Context) error { panic("kaboom") })
		t.Fatal("the panic was swallowed")
	}()
	require.Equal(t, []core.Outcome{core.Failed}, events)
	out, err := g.Do(ctx, "panic", func(context.Context) error { return nil })
	require.NoError(t, err)
	require.Equal(t, core.Ran, out, "a panicking job's claim is released")
}

// holdKey runs a job on key that blocks until release is closed, and waits
// until it holds the claim. The returned channel yields its outcome.
func holdKey(t *testing.T, g *core.Guard, key string, release <-chan struct{}) <-chan core.Outcome {
	t.Helper()
	started := make(chan struct{})
	done := make(chan core.Outcome, 1)
	go func() {
		out, _ := g.Do(context.Background(), key, func(ctx context.Context) error {
			close(started)
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})
		done <- out
	}()
	select {
	case <-started:
	case out := <-done:
		t.Fatalf("holder did not run: %s", out)
	case <-time.After(10 * time.Second):
		t.Fatal("holder did not start")
	}
	return done
}

func runningGetsBoundedRetryAfter(t *testing.T, s *suite) {
	g := s.guard(s.store, core.Config{Lease: 3 * time.Second, MinRetryAfter: 200 * time.Millisecond, MaxRetryAfter: time.Second})
	release := make(chan struct{})
	done := holdKey(t, g, "busy", release)
	out, err := g.Do(ctx(t), "busy", func(context.Context) error { return errors.New("must not run") })
	require.Equal(t, core.Running, out)
	require.ErrorIs(t, err, core.ErrRunning)
	d, ok := core.RetryAfter(err)
	require.True(t, ok)
	require.Equal(t, time.Second, d, "remaining lease (~3s) is capped by MaxRetryAfter")
	close(release)
	require.Equal(t, core.Ran, <-done)
}

func duplicateGetsStoredResult(t *testing.T, s *suite) {
	g := s.guard(s.store, core.Config{})
	ctx := ctx(t)
	job := core.Job{Key: "res", Fingerprint: core.Fingerprint([]byte("payload"))}
	res, err := g.Run(ctx, job, func(context.Context) ([]byte, error) { return []byte("receipt-7"), nil })
	require.NoError(t, err)
	require.Equal(t, core.Result{Outcome: core.Ran, Value: []byte("receipt-7")}, res)
	res, err = g.Run(ctx, job, func(context.Context) ([]byte, error) { return nil, errors.New("must not run") })
	require.NoError(t, err)
	require.Equal(t, core.Result{Outcome: core.Duplicate, Value: []byte("receipt-7")}, res)
}

// resultOverMaxResultSizeIsNotStored runs jobs whose results are at and
// over Config.MaxResultSize, through Run and through Claim, Work and Finish
// (a batch of markers), and under the default limit: a job over the limit
// is Ran with its whole result and a nil error, its event's Err names the
// size and the limit, it is logged at Warn, and its duplicate is a Duplicate
// without a result; a job at the limit keeps its result.
func resultOverMaxResultSizeIsNotStored(t *testing.T, s *suite) {
	var mu sync.Mutex
	events := map[string]core.Event{}
	var warned atomic.Int32
	observe := func(_ context.Context, e core.Event) {
		mu.Lock()
		defer mu.Unlock()
		if e.Outcome == core.Ran {
			events[e.Key] = e
		}
	}
	logger := slog.New(warnCounter{&warned})
	ctx := ctx(t)
	sized := func(n int) []byte { return []byte(strings.Repeat("r", n)) }
	requireRan := func(g *core.Guard, key string, result []byte, stored bool) {
		t.Helper()
		mu.Lock()
		e := events[key]
		mu.Unlock()
		require.Equal(t, core.Ran, e.Outcome, key)
		if stored {
			require.NoError(t, e.Err, key)
		} else {
			require.ErrorIs(t, e.Err, core.ErrResultTooLarge, key)
			require.ErrorContains(t, e.Err, fmt.Sprintf("%d bytes, over Config.MaxResultSize (%d bytes)", len(result), len(result)-1), key)
		}
		res, err := g.Run(ctx, core.Job{Key: key}, func(context.Context) ([]byte, error) { return nil, errors.New("must not run") })
		require.NoError(t, err, key)
		require.Equal(t, core.Duplicate, res.Outcome, key)
		if stored {
			require.Equal(t, result, res.Value, "%s: the result is stored", key)
		} else {
			require.Nil(t, res.Value, "%s: the result is not stored", key)
		}
	}

	g := s.guard(s.store, core.Config{MaxResultSize: 1024, Observer: observe, Logger: logger})
	for _, c := range []struct {
		key    string
		size   int
		stored bool
	}{{"at-limit", 1024, true}, {"over-limit", 1025, false}} {
		res, err := g.Run(ctx, core.Job{Key: c.key}, func(context.Context) ([]byte, error) { return sized(c.size), nil })
		require.NoError(t, err, "%s: the job ran and is handled", c.key)
		require.Equal(t, core.Result{Outcome: core.Ran, Value: sized(c.size)}, res, c.key)
		requireRan(g, c.key, sized(c.size), c.stored)
	}
	require.EqualValues(t, 1, warned.Load(), "the result not stored is logged at Warn")

	jobs := []core.Job{{Key: "batch-over"}, {Key: "batch-at"}, {Key: "batch-under"}}
	sizes := []int{1025, 1024, 3}
	claims := g.Claim(ctx, jobs...)
	for i, c := range claims {
		require.True(t, c.Runs(), jobs[i].Key)
		res, err := c.Work(ctx, func(context.Context) ([]byte, error) { return sized(sizes[i]), nil })
		require.NoError(t, err)
		require.Equal(t, core.Result{Outcome: core.Ran, Value: sized(sizes[i])}, res)
	}
	require.Equal(t, []core.Outcome{core.Ran, core.Ran, core.Ran}, g.Finish(ctx, claims...))
	for i, job := range jobs {
		requireRan(g, job.Key, sized(sizes[i]), sizes[i] <= 1024)
	}

	byDefault := s.guard(s.store, core.Config{Observer: observe})
	for _, c := range []struct {
		key    string
		size   int
		stored bool
	}{{"default-at", core.DefaultMaxResultSize, true}, {"default-over", core.DefaultMaxResultSize + 1, false}} {
		res, err := byDefault.Run(ctx, core.Job{Key: c.key}, func(context.Context) ([]byte, error) { return sized(c.size), nil })
		require.NoError(t, err, c.key)
		require.Equal(t, core.Ran, res.Outcome, c.key)
		requireRan(byDefault, c.key, sized(c.size), c.stored)
	}
}

// warnCounter is a slog.Handler that counts the records at Warn and above.
type warnCounter struct{ n *atomic.Int32 }

func (w warnCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w warnCounter) Handle(context.Context, slog.Record) error    { w.n.Add(1); return nil }
func (w warnCounter) WithAttrs([]slog.Attr) slog.Handler           { return w }
func (w warnCounter) WithGroup(string) slog.Handler                { return w }

func conflictOnOtherPayload(t *testing.T, s *suite) {
	g := s.guard(s.store, core.Config{})
	ctx := ctx(t)
	a := core.Job{Key: "conf", Fingerprint: core.Fingerprint([]byte("a"))}
	b := core.Job{Key: "conf", Fingerprint: core.Fingerprint([]byte("b"))}
	_, err := g.Run(ctx, a, func(context.Context) ([]byte, error) { return nil, nil })
	require.NoError(t, err)
	res, err := g.Run(ctx, b, func(context.Context) ([]byte, error) { return nil, errors.New("must not run") })
	require.Equal(t, core.Conflict, res.Outcome)
	require.ErrorIs(t, err, core.ErrConflict)

	release := make(chan struct{})
	defer close(release)
	holdKey(t, g, "conf-running", release)
	_, err = g.Run(ctx, core.Job{Key: "conf-running", Fingerprint: "x"}, func(context.Context) ([]byte, error) { return nil, nil })
	require.ErrorIs(t, err, core.ErrRunning, "Do's own copies carry no fingerprint, so no conflict")
}

func heartbeatKeepsLongJobExclusive(t *testing.T, s *suite) {
	const lease = time.Second // generous: a loaded machine can take a while to answer an extend
	g := s.guard(s.store, core.Config{Lease: lease})
	ctx := ctx(t)
	var runs atomic.Int32
	done := make(chan core.Outcome, 1)
	go func() {
		out, _ := g.Do(ctx, "long", func(ctx context.Context) error {
			runs.Add(1)
			select { // the job's own work: three leases long
			case <-time.After(3 * lease):
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})
		done <- out
	}()
	require.Eventually(t, func() bool { return runs.Load() == 1 }, 5*time.Second, time.Millisecond)
	for {
		select {
		case out := <-done:
			require.Equal(t, core.Ran, out, "the heartbeat kept the lease for a job three leases long")
			require.EqualValues(t, 1, runs.Load())
			return
		default:
		}
		out, err := g.Do(ctx, "long", func(context.Context) error { runs.Add(1); return nil })
		if out != core.Duplicate {
			require.Equal(t, core.Running, out, "a copy got in while the long job ran: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // pacing the copies, not synchronisation
	}
}

func lostHeartbeatCancelsJob(t *testing.T, s *suite) {
	// A claim answered past half its lease runs nothing: the lease leaves
	// room for a pause of the process or a slow store.
	const lease = time.Second
	faulty := newFaulty(s.store)
	g := s.guard(faulty, core.Config{Lease: lease})
	later := s.guard(s.store, core.Config{Lease: lease})
	ctx := ctx(t)
	faulty.SetExtendDown(true)
	var cause error
	out, err := g.Do(ctx, "lost", func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
			return cause
		case <-time.After(10 * time.Second):
			return errors.New("the job's context was not cancelled when its lease ran out")
		}
	})
	require.Equal(t, core.Failed, out)
	require.ErrorIs(t, err, core.ErrLeaseLost)
	require.ErrorIs(t, cause, core.ErrLeaseLost)
	ran := false
	require.Eventually(t, func() bool {
		out, _ := later.Do(ctx, "lost", func(context.Context) error { ran = true; return nil })
		return out == core.Ran
	}, 10*time.Second, 20*time.Millisecond, "a later copy runs once the lost lease is gone")
	require.True(t, ran)
}

func expiredLeaseLetsLaterCopyRun(t *testing.T, s *suite) {
	const lease = 100 * time.Millisecond
	g := s.guard(s.store, core.Config{Lease: lease, DisableHeartbeat: true})
	ctx := ctx(t)
	// The later copy holds a lease of the default length, so that its marker
	// is written under its claim however slow the store; it may run more
	// than once only if a try of it fails.
	later := s.guard(s.store, core.Config{})
	secondRan := make(chan struct{})
	var once sync.Once
	key, done := startHolder(t, ctx, g, "zombie", func(context.Context) error {
		<-secondRan // a stalled worker outlives its lease
		return nil
	})
	require.Eventually(t, func() bool {
		out, _ := later.Do(ctx, key, func(context.Context) error { once.Do(func() { close(secondRan) }); return nil })
		return out == core.Ran
	}, 10*time.Second, 10*time.Millisecond)
	select {
	case out := <-done:
		require.Equal(t, core.LeaseLost, out, "the stalled copy's lost lease is reported, not silent")
	case <-time.After(10 * time.Second):
		t.Fatal("the stalled copy did not return after the later copy ran")
	}
}

// startHolder starts a copy of a job that runs body under its claim, on a
// key named after name, and returns once body has begun: the key, and the
// copy's outcome to come. A claim answered past half a short lease (a
// loaded machine) fails closed and runs nothing; that attempt is made again
// on a new key, up to 20 times.
func startHolder(t *testing.T, ctx context.Context, g *core.Guard, name string, body func(context.Context) error) (string, <-chan core.Outcome) {
	t.Helper()
	for attempt := range 20 {
		key := fmt.Sprintf("%s-%d", name, attempt)
		started := make(chan struct{})
		done := make(chan core.Outcome, 1)
		go func() {
			out, _ := g.Do(ctx, key, func(ctx context.Context) error {
				close(started)
				return body(ctx)
			})
			done <- out
		}()
		select {
		case <-started:
			return key, done
		case out := <-done:
			require.Equal(t, core.Unavailable, out, "the holder neither ran nor failed closed")
		case <-time.After(10 * time.Second):
			t.Fatal("the holder neither ran nor returned")
		}
	}
	t.Fatal("every holder's claim was answered past half its lease")
	return "", nil
}

func failClosedAndFailOpen(t *testing.T, s *suite) {
	faulty := newFaulty(s.store)
	faulty.SetDown(true)
	ctx := ctx(t)
	closed := s.guard(faulty, core.Config{})
	ran := false
	out, err := closed.Do(ctx, "down", func(context.Context) error { ran = true; return nil })
	require.Equal(t, core.Unavailable, out)
	require.ErrorIs(t, err, core.ErrStoreUnavailable)
	require.ErrorIs(t, err, errInjected)
	require.False(t, ran, "fail closed: the job must not run")

	open := s.guard(faulty, core.Config{FailOpen: true})
	out, err = open.Do(ctx, "down", func(context.Context) error { ran = true; return nil })
	require.NoError(t, err)
	require.Equal(t, core.Unguarded, out)
	require.True(t, ran)

	faulty.SetDown(false)
	out, err = closed.Do(ctx, "down", func(context.Context) error { return nil })
	require.NoError(t, err)
	require.Equal(t, core.Ran, out, "once the store is back the job runs")
}

func unrecordedWhenCompleteFails(t *testing.T, s *suite) {
	faulty := newFaulty(s.store)
	faulty.SetFinishDown(true)
	var ev core.Event
	g2 := s.guard(faulty, core.Config{Lease: time.Minute, Observer: func(_ context.Context, e core.Event) { ev = e }})
	out, err := g2.Do(ctx(t), "unrec", func(context.Context) error { return nil })
	require.NoError(t, err, "the effect happened, so the delivery is acknowledged")
	require.Equal(t, core.Unrecorded, out)
	require.Equal(t, core.Unrecorded, ev.Outcome)
	require.ErrorIs(t, ev.Err, errInjected)
}

func badInput(t *testing.T, s *suite) {
	g := s.guard(s.store, core.Config{})
	ctx := ctx(t)
	out, err := g.Do(ctx, "", func(context.Context) error { return nil })
	require.Equal(t, core.Rejected, out)
	require.ErrorIs(t, err, core.ErrInvalidKey)

	_, err = g.Do(ctx, "nil-fn", nil)
	require.ErrorContains(t, err, "nil")

	big := strings.Repeat("k", 1<<20)
	other := big[:len(big)-1] + "j"
	for _, key := range []string{big, other} {
		out, err = g.Do(ctx, key, func(context.Context) error { return nil })
		require.NoError(t, err)
		require.Equal(t, core.Ran, out, "a 1 MiB key works and differs from one that differs in its last byte")
	}
	out, err = g.Do(ctx, big, func(context.Context) error { return nil })
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, out)
}

func enqueue(t *testing.T, s *suite) {
	g := s.guard(s.store, core.Config{})
	ctx := ctx(t)
	published := 0
	publish := func(context.Context) error { published++; return nil }
	ok, err := g.Enqueue(ctx, "send", time.Minute, publish)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = g.Enqueue(ctx, "send", time.Minute, publish)
	require.NoError(t, err)
	require.False(t, ok, "a second enqueue within the window is skipped")
	require.Equal(t, 1, published)

	outage := errors.New("broker down")
	ok, err = g.Enqueue(ctx, "retry", time.Minute, func(context.Context) error { return outage })
	require.Same(t, outage, err)
	require.False(t, ok)
	ok, err = g.Enqueue(ctx, "retry", time.Minute, publish)
	require.NoError(t, err)
	require.True(t, ok, "a failed publish deletes its marker so the retry publishes")

	_, err = g.Enqueue(ctx, "", time.Minute, publish)
	require.ErrorIs(t, err, core.ErrInvalidKey)
	_, err = g.Enqueue(ctx, "w", 0, publish)
	require.ErrorContains(t, err, "window")
}

func claimWorkFinish(t *testing.T, s *suite) {
	g := s.guard(s.store, core.Config{})
	ctx := ctx(t)
	jobs := []core.Job{{Key: "b1"}, {Key: "b2"}, {Key: "b1"}, {Key: ""}, {Key: "b3"}}
	claims := g.Claim(ctx, jobs...)
	require.Len(t, claims, len(jobs))
	require.True(t, claims[0].Runs())
	require.True(t, claims[1].Runs())
	require.False(t, claims[2].Runs(), "the second copy of b1 in one batch does not hold it")
	require.False(t, claims[3].Runs())
	var pending []*core.Claim
	for i, c := range claims {
		res, err := c.Work(ctx, func(context.Context) ([]byte, error) {
			if i == 4 {
				return nil, errors.New("b3 fails")
			}
			return []byte{byte(i)}, nil
		})
		switch i {
		case 0, 1:
			require.NoError(t, err)
			require.Equal(t, core.Ran, res.Outcome)
			pending = append(pending, c)
		case 2:
			require.ErrorIs(t, err, core.ErrRunning)
		case 3:
			require.ErrorIs(t, err, core.ErrInvalidKey)
		case 4:
			require.Equal(t, core.Failed, res.Outcome)
		}
	}
	require.Equal(t, []core.Outcome{core.Ran, core.Ran}, g.Finish(ctx, pending...))
	require.Equal(t, []core.Outcome{core.Ran}, g.Finish(ctx, pending[0]), "a claim is finished once; Finish repeats its outcome")
	require.Equal(t, []core.Outcome{core.Running, core.Rejected, core.Failed, core.Rejected}, g.Finish(ctx, claims[2], claims[3], claims[4], nil),
		"Finish repeats the final outcome Work gave, and rejects a nil claim")
	unused := g.Claim(ctx, core.Job{Key: "b9"})[0]
	require.Equal(t, []core.Outcome{core.Rejected}, g.Finish(ctx, unused), "a claim Work was not called on is not finished")
	res0, err := unused.Work(ctx, func(context.Context) ([]byte, error) { return nil, nil })
	require.NoError(t, err)
	require.Equal(t, core.Ran, res0.Outcome)
	require.Equal(t, []core.Outcome{core.Ran}, g.Finish(ctx, unused))
	res, err := g.Run(ctx, core.Job{Key: "b2"}, func(context.Context) ([]byte, error) { return nil, nil })
	require.NoError(t, err)
	require.Equal(t, core.Result{Outcome: core.Duplicate, Value: []byte{1}}, res)
	res, err = g.Run(ctx, core.Job{Key: "b3"}, func(context.Context) ([]byte, error) { return nil, nil })
	require.NoError(t, err)
	require.Equal(t, core.Ran, res.Outcome, "the failed job was released")
}

// Fingerprints of any length are recorded: a redelivery is a Duplicate with
// the stored result, another payload a Conflict.
func longFingerprints(t *testing.T, s *suite) {
	for _, cfg := range []core.Config{{}, {DisableGroupCommit: true}} {
		g := s.guard(s.store, cfg)
		ctx := ctx(t)
		for _, n := range []int{64, 65, 256, 70_000} {
			key := fmt.Sprintf("fp-%d-%t", n, cfg.DisableGroupCommit)
			fp := strings.Repeat("f", n-1)
			job := core.Job{Key: key, Fingerprint: fp + "\x00"}
			res, err := g.Run(ctx, job, func(context.Context) ([]byte, error) { return []byte("r"), nil })
			require.NoError(t, err)
			require.Equal(t, core.Ran, res.Outcome, "fingerprint of %d bytes", n)
			res, err = g.Run(ctx, job, func(context.Context) ([]byte, error) { return nil, errors.New("must not run") })
			require.NoError(t, err)
			require.Equal(t, core.Result{Outcome: core.Duplicate, Value: []byte("r")}, res, "fingerprint of %d bytes", n)
			res, err = g.Run(ctx, core.Job{Key: key, Fingerprint: fp + "x"}, func(context.Context) ([]byte, error) { return nil, errors.New("must not run") })
			require.ErrorIs(t, err, core.ErrConflict)
			require.Equal(t, core.Conflict, res.Outcome)
		}
	}
}

// With PlainKeys, an Enqueue marker never holds a job key, whatever its name.
func plainKeysKeepEnqueueApart(t *testing.T, s *suite) {
	g := s.guard(s.store, core.Config{PlainKeys: true})
	ctx := ctx(t)
	for _, key := range []string{"report", "enq#report"} {
		ok, err := g.Enqueue(ctx, key, time.Minute, func(context.Context) error { return nil })
		require.NoError(t, err)
		require.True(t, ok)
	}
	for _, key := range []string{"enq:report", "enq#report", "report", "#report"} {
		out, err := g.Do(ctx, key, func(context.Context) error { return nil })
		require.NoError(t, err)
		require.Equal(t, core.Ran, out, "job key %q is apart from Enqueue's markers", key)
	}
}
