package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
)

// runNotifier runs the cases of driver.Notifier's contract: stores made by
// newStore must implement it.
func runNotifier(t *testing.T, newStore NewStore) {
	cases := []struct {
		name string
		fn   func(t *testing.T, s *suite, n driver.Notifier)
	}{
		{"AwaitClaimsAFreeKey", awaitClaimsAFreeKey},
		{"AwaitedCompleteNotifies", awaitedCompleteNotifies},
		{"AwaitedReleaseNotifies", awaitedReleaseNotifies},
		{"UnawaitedEndsDoNotNotify", unawaitedEndsDoNotNotify},
		{"WaiterStormReadsEachCopyBoundedTimes", waiterStormReadsEachCopyBoundedTimes},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newSuite(t, newStore)
			n, ok := s.store.(driver.Notifier)
			require.True(t, ok, "%T does not implement driver.Notifier", s.store)
			c.fn(t, s, n)
		})
	}
}

// notes records what a Listener notifies.
type notes chan string

func newNotes() notes { return make(notes, 1024) }

func (n notes) notify(key string) {
	select {
	case n <- key:
	default: // a test that reads nothing more
	}
}

// until reads notifications until key comes, within 10s, and returns the
// keys notified before it.
func (n notes) until(t *testing.T, key string) []string {
	t.Helper()
	var before []string
	deadline := time.After(10 * time.Second)
	for {
		select {
		case k := <-n:
			if k == key {
				return before
			}
			before = append(before, k)
		case <-deadline:
			t.Fatalf("no notification of %q within 10s (saw %q)", key, before)
		}
	}
}

// listen opens a Listener on n listening to keys, and waits until
// listening to each has begun.
func listen(t *testing.T, n driver.Notifier, keys ...string) (driver.Listener, notes) {
	t.Helper()
	ctx := ctx(t)
	got := newNotes()
	l, err := n.Listen(ctx, got.notify)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	for _, k := range keys {
		require.NoError(t, l.Add(ctx, k))
		got.until(t, k)
	}
	return l, got
}

func awaitClaimsAFreeKey(t *testing.T, s *suite, n driver.Notifier) {
	ctx, key := ctx(t), s.key("free")
	r, err := n.Await(ctx, claimReq(key, driver.NewToken(), "fp", time.Minute))
	fence := s.fence(r, err)
	done := driver.CompleteRequest{Key: key, Token: driver.NewToken(), Fingerprint: "fp", Retention: time.Minute}
	require.ErrorIs(t, n.Complete(ctx, done), driver.ErrLeaseLost, "the key is held by Await's claim")
	r, err = n.Await(ctx, claimReq(key, driver.NewToken(), "fp", time.Minute))
	require.NoError(t, err)
	require.Equal(t, driver.StateRunning, r.State)
	require.Equal(t, fence, r.Fence, "a running claim's reply carries its fence")
	require.Greater(t, r.Remaining, 50*time.Second)
}

func awaitedCompleteNotifies(t *testing.T, s *suite, n driver.Notifier) {
	ctx, key := ctx(t), s.key("done")
	holder := driver.NewToken()
	fence := s.fence(n.Claim(ctx, claimReq(key, holder, "fp", time.Minute)))
	_, got := listen(t, n, key)
	r, err := n.Await(ctx, claimReq(key, driver.NewToken(), "fp", time.Minute))
	require.NoError(t, err)
	require.Equal(t, driver.StateRunning, r.State)
	require.Equal(t, fence, r.Fence)
	require.NoError(t, n.Complete(ctx, driver.CompleteRequest{Key: key, Token: holder, Fingerprint: "fp", Retention: time.Minute, Fence: fence}))
	got.until(t, key)
	r, err = n.Await(ctx, claimReq(key, driver.NewToken(), "fp", time.Minute))
	require.NoError(t, err)
	require.Equal(t, driver.StateDone, r.State, "a done key is reported done, not marked")
}

func awaitedReleaseNotifies(t *testing.T, s *suite, n driver.Notifier) {
	ctx, key := ctx(t), s.key("released")
	holder := driver.NewToken()
	s.fence(n.Claim(ctx, claimReq(key, holder, "fp", time.Minute)))
	_, got := listen(t, n, key)
	r, err := n.Await(ctx, claimReq(key, driver.NewToken(), "fp", time.Minute))
	require.NoError(t, err)
	require.Equal(t, driver.StateRunning, r.State)
	require.NoError(t, n.Release(ctx, key, holder))
	got.until(t, key)
	s.fence(n.Await(ctx, claimReq(key, driver.NewToken(), "fp", time.Minute)))
}

// unawaitedEndsDoNotNotify: claims nobody awaited end without a
// notification. Notifications come in the order the store made them, so
// once the awaited key's has come, none is due for the others.
func unawaitedEndsDoNotNotify(t *testing.T, s *suite, n driver.Notifier) {
	ctx := ctx(t)
	quietDone, quietReleased, awaited := s.key("quiet-done"), s.key("quiet-released"), s.key("awaited")
	tokens := map[string]driver.Token{}
	fences := map[string]int64{}
	for _, k := range []string{quietDone, quietReleased, awaited} {
		tokens[k] = driver.NewToken()
		fences[k] = s.fence(n.Claim(ctx, claimReq(k, tokens[k], "", time.Minute)))
	}
	_, got := listen(t, n, quietDone, quietReleased, awaited)
	// Claims that find the keys running, with Claim rather than Await, mark nothing.
	for _, k := range []string{quietDone, quietReleased} {
		r, err := n.Claim(ctx, claimReq(k, driver.NewToken(), "", time.Minute))
		require.NoError(t, err)
		require.Equal(t, driver.StateRunning, r.State)
	}
	r, err := n.Await(ctx, claimReq(awaited, driver.NewToken(), "", time.Minute))
	require.NoError(t, err)
	require.Equal(t, driver.StateRunning, r.State)
	require.NoError(t, n.Complete(ctx, driver.CompleteRequest{Key: quietDone, Token: tokens[quietDone], Retention: time.Minute, Fence: fences[quietDone]}))
	require.NoError(t, n.Release(ctx, quietReleased, tokens[quietReleased]))
	require.NoError(t, n.Complete(ctx, driver.CompleteRequest{Key: awaited, Token: tokens[awaited], Retention: time.Minute, Fence: fences[awaited]}))
	require.Empty(t, got.until(t, awaited), "a claim nobody awaited ended with a notification")
}

// copyReads wraps a store that notifies and counts the Await calls of each
// copy, by the copy's context (see withCopy).
type copyReads struct {
	driver.Notifier
	mu    sync.Mutex
	reads map[int]int
}

type copyID struct{}

// withCopy marks ctx as copy i's.
func withCopy(ctx context.Context, i int) context.Context {
	return context.WithValue(ctx, copyID{}, i)
}

func (c *copyReads) Await(ctx context.Context, req driver.ClaimRequest) (driver.ClaimReply, error) {
	if i, ok := ctx.Value(copyID{}).(int); ok {
		c.mu.Lock()
		c.reads[i]++
		c.mu.Unlock()
	}
	return c.Notifier.Await(ctx, req)
}

// of returns how many times copy i read its key.
func (c *copyReads) of(i int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads[i]
}

// timerReads is how many times a waiting copy reads its key unwoken within
// d: after a second, then twice as long each time (core's firstCheck).
func timerReads(d time.Duration) int {
	n := 0
	for next, at := time.Second, time.Second; at <= d; next, at = 2*next, at+2*next {
		n++
	}
	return n
}

// waiterStormReadsEachCopyBoundedTimes: copies of one running job join the
// wait one after another, each once the one before has read the key, on
// several Guards sharing the store, as the consumers of many processes do.
// Each copy reads the key a bounded number of times, however many wait: once
// listening has begun, once when the holder's done marker ends the wait,
// and once per timer of its own; no copy's listening wakes another.
func waiterStormReadsEachCopyBoundedTimes(t *testing.T, s *suite, n driver.Notifier) {
	const (
		guards = 2
		copies = 48
	)
	reads := &copyReads{Notifier: n, reads: map[int]int{}}
	gs := make([]*core.Guard, guards)
	for i := range gs {
		gs[i] = s.guard(reads, core.Config{Lease: time.Minute})
		t.Cleanup(func() { _ = gs[i].Close() })
	}
	ctx := ctx(t)
	// Every copy waits, past the Guard's limits on waiting copies, as
	// copies held in their workers anyway do.
	job := core.Job{Key: "storm", HoldsWorker: true}
	h := hold(ctx, gs[0], job, nil)
	<-h.started
	start := time.Now()
	seconds := make([]<-chan waited, copies)
	for i := range copies {
		seconds[i] = waitCopy(withCopy(ctx, i), gs[i%guards], job, 30*time.Second)
		require.Eventually(t, func() bool {
			if reads.of(i) > 0 {
				return true
			}
			select {
			case w := <-seconds[i]: // it did not wait
				ch := make(chan waited, 1)
				ch <- w
				seconds[i] = ch
				return true
			default:
				return false
			}
		}, 10*time.Second, time.Millisecond, "copy %d did not read its key", i)
	}
	close(h.release)
	<-h.done
	require.NoError(t, h.err)
	for i := range copies {
		w := <-seconds[i]
		require.NoError(t, w.err, "copy %d", i)
		require.Equal(t, core.Duplicate, w.res.Outcome, "copy %d", i)
	}
	bound := 2 + timerReads(time.Since(start))
	var most, total int
	for i := range copies {
		most = max(most, reads.of(i))
		total += reads.of(i)
	}
	t.Logf("%d copies read the key %d times (%.1f each, at most %d; bound %d)", copies, total, float64(total)/copies, most, bound)
	require.LessOrEqual(t, most, bound, "a copy read its unchanged key again as others joined the wait")
}
