package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// releaseEnv is a Guard on the test Redis under a prefix of its own, and the
// CLI's arguments for that prefix.
type releaseEnv struct {
	client *redis.Client
	store  *redisstore.Store
	guard  *core.Guard
	prefix string
}

func newReleaseEnv(t *testing.T, cfg core.Config) releaseEnv {
	prefix := testenv.Prefix(t)
	client := testenv.Redis(t, prefix)
	store, err := redisstore.New(client, nil)
	require.NoError(t, err)
	cfg.KeyPrefix = prefix
	g, err := core.New(store, &cfg)
	require.NoError(t, err)
	return releaseEnv{client: client, store: store, guard: g, prefix: prefix}
}

func (e releaseEnv) run(t *testing.T, a ...string) (string, error) {
	var out bytes.Buffer
	err := run(context.Background(), append([]string{"-redis", testenv.RedisURL(), "-prefix", e.prefix}, a...), &out)
	return out.String(), err
}

func (e releaseEnv) inspect(t *testing.T, key string) redisstore.Record {
	stored, err := e.guard.StoredKey(key)
	require.NoError(t, err)
	rec, err := e.store.Inspect(context.Background(), stored)
	require.NoError(t, err)
	return rec
}

// holdJob runs key's job on g until stop is closed, and returns its outcome
// on the channel once it ends.
func holdJob(t *testing.T, g *core.Guard, key string, stop <-chan struct{}) (jobCtx <-chan context.Context, done <-chan core.Outcome) {
	started := make(chan context.Context, 1)
	ended := make(chan core.Outcome, 1)
	go func() {
		o, _ := g.Do(context.Background(), key, func(ctx context.Context) error {
			started <- ctx
			<-stop
			return nil
		})
		ended <- o
	}()
	return started, ended
}

func TestReleaseRefusesAClaimItsHolderRenews(t *testing.T) {
	e := newReleaseEnv(t, core.Config{Lease: 900 * time.Millisecond})
	stop := make(chan struct{})
	started, done := holdJob(t, e.guard, "job-1", stop)
	jobCtx := <-started
	before := e.inspect(t, "job-1")
	require.Equal(t, driver.StateRunning, before.State)

	out, err := e.run(t, "release", "job-1")
	require.ErrorContains(t, err, "alive and renewing", "output:\n%s", out)
	require.ErrorContains(t, err, "-force")
	require.Contains(t, out, "watch")
	require.NotContains(t, out, "released:")

	after := e.inspect(t, "job-1")
	require.Equal(t, driver.StateRunning, after.State, "the claim is still held")
	require.Equal(t, before.Token, after.Token, "by the same holder")
	require.NoError(t, jobCtx.Err(), "the holder kept its lease")
	ran := false
	_, err = e.guard.Do(context.Background(), "job-1", func(context.Context) error { ran = true; return nil })
	require.ErrorIs(t, err, core.ErrRunning, "a second copy does not run while the first holds the claim")
	require.False(t, ran)

	out, err = e.run(t, "-force", "release", "job-1")
	require.NoError(t, err, "output:\n%s", out)
	require.Contains(t, out, "released")
	require.Contains(t, out, "alive and renewing", "-force says the claim it released was live")
	o, err := e.guard.Do(context.Background(), "job-1", func(context.Context) error { ran = true; return nil })
	require.NoError(t, err)
	require.Equal(t, core.Ran, o, "-force lets the next copy run")
	close(stop)
	require.Equal(t, core.LeaseLost, <-done, "the forced-out holder learns it lost its claim")
}

func TestReleaseDeletesAClaimWhoseHolderDied(t *testing.T) {
	e := newReleaseEnv(t, core.Config{Lease: time.Minute})
	stored, err := e.guard.StoredKey("job-1")
	require.NoError(t, err)
	// A claim no heartbeat renews, as a holder that crashed leaves it.
	reply, err := e.store.Claim(context.Background(), driver.ClaimRequest{Key: stored, Token: driver.Token{1, 2, 3}, Lease: 2 * time.Second})
	require.NoError(t, err)
	require.Equal(t, driver.StateClaimed, reply.State)

	out, err := e.run(t, "release", "job-1")
	require.NoError(t, err, "output:\n%s", out)
	require.Contains(t, out, "released")
	require.Contains(t, out, "no renewal")
	require.Equal(t, driver.State(0), e.inspect(t, "job-1").State)
	o, err := e.guard.Do(context.Background(), "job-1", func(context.Context) error { return nil })
	require.NoError(t, err)
	require.Equal(t, core.Ran, o)
}

func TestReleaseRefusesWhenItCannotWatchLongEnough(t *testing.T) {
	e := newReleaseEnv(t, core.Config{})
	stored, err := e.guard.StoredKey("job-1")
	require.NoError(t, err)
	_, err = e.store.Claim(context.Background(), driver.ClaimRequest{Key: stored, Token: driver.Token{1}, Lease: time.Minute})
	require.NoError(t, err)

	out, err := e.run(t, "-watch", "50ms", "release", "job-1")
	require.ErrorContains(t, err, "no renewal in", "output:\n%s", out)
	require.ErrorContains(t, err, "-watch 20.", "it names the watch that could tell")
	require.Equal(t, driver.StateRunning, e.inspect(t, "job-1").State)

	out, err = e.run(t, "-force", "-watch", "50ms", "release", "job-1")
	require.NoError(t, err, "output:\n%s", out)
	require.Contains(t, out, "released although no renewal in")
	require.Equal(t, driver.State(0), e.inspect(t, "job-1").State)
}

func TestReleaseLeavesTheDoneMarkerOfAJobThatFinishesWhileItWatches(t *testing.T) {
	// Without a heartbeat the holder looks dead, so only its done marker
	// can stop the release.
	e := newReleaseEnv(t, core.Config{Lease: 3 * time.Second, DisableHeartbeat: true})
	stop := make(chan struct{})
	started, done := holdJob(t, e.guard, "job-1", stop)
	<-started

	w := newSignalWriter("watching")
	errc := make(chan error, 1)
	go func() {
		errc <- run(context.Background(), []string{"-redis", testenv.RedisURL(), "-prefix", e.prefix, "release", "job-1"}, w)
	}()
	w.wait(t)
	close(stop)
	require.Equal(t, core.Ran, <-done)
	require.ErrorContains(t, <-errc, "the job finished", "output:\n%s", w.String())
	require.Equal(t, driver.StateDone, e.inspect(t, "job-1").State)

	out, err := e.run(t, "release", "job-1")
	require.ErrorContains(t, err, "no running claim", "output:\n%s", out)
	require.Equal(t, driver.StateDone, e.inspect(t, "job-1").State, "release never deletes a done marker")
	o, err := e.guard.Do(context.Background(), "job-1", func(context.Context) error { return nil })
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, o)
}

func TestReleaseKeepsAClaimTakenWhileItWatches(t *testing.T) {
	e := newReleaseEnv(t, core.Config{})
	stored, err := e.guard.StoredKey("job-1")
	require.NoError(t, err)
	ctx := context.Background()
	first, second := driver.Token{1}, driver.Token{2}
	_, err = e.store.Claim(ctx, driver.ClaimRequest{Key: stored, Token: first, Lease: 3 * time.Second})
	require.NoError(t, err)

	w := newSignalWriter("watching")
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, []string{"-redis", testenv.RedisURL(), "-prefix", e.prefix, "-force", "release", "job-1"}, w)
	}()
	w.wait(t)
	// Another copy's claim replaces it in one step, as when the lease
	// expires and a redelivery claims the key between two reads.
	_, err = e.store.Claim(ctx, driver.ClaimRequest{Key: stored + "other", Token: second, Lease: time.Minute})
	require.NoError(t, err)
	v, err := e.client.Get(ctx, stored+"other").Result()
	require.NoError(t, err)
	require.NoError(t, e.client.Set(ctx, stored, v, 3*time.Second).Err())

	require.ErrorContains(t, <-errc, "claimed again", "output:\n%s", w.String())
	rec := e.inspect(t, "job-1")
	require.Equal(t, driver.StateRunning, rec.State, "even -force keeps a claim it did not inspect")
	require.Equal(t, second, rec.Token)
}

func TestReleaseDeletesOnlyTheClaimItInspected(t *testing.T) {
	e := newReleaseEnv(t, core.Config{})
	stored, err := e.guard.StoredKey("job-1")
	require.NoError(t, err)
	ctx := context.Background()
	first, second := driver.Token{1}, driver.Token{2}
	_, err = e.store.Claim(ctx, driver.ClaimRequest{Key: stored, Token: first, Lease: time.Second})
	require.NoError(t, err)
	rec := e.inspect(t, "job-1")

	// The claim changes hands between the last look and the delete.
	swap := swapBeforeRelease{Store: e.store, swap: func() {
		require.NoError(t, e.store.Release(ctx, stored, first))
		_, err := e.store.Claim(ctx, driver.ClaimRequest{Key: stored, Token: second, Lease: time.Minute})
		require.NoError(t, err)
	}}
	var out bytes.Buffer
	err = release(ctx, swap, &out, stored, rec, false, time.Second)
	require.ErrorContains(t, err, "the claim changed since it was read", "output:\n%s", out.String())
	after := e.inspect(t, "job-1")
	require.Equal(t, driver.StateRunning, after.State)
	require.Equal(t, second, after.Token, "the claim taken meanwhile is kept")
}

// swapBeforeRelease runs swap just before each Release it passes on.
type swapBeforeRelease struct {
	*redisstore.Store
	swap func()
}

func (s swapBeforeRelease) Release(ctx context.Context, key string, token driver.Token) error {
	s.swap()
	return s.Store.Release(ctx, key, token)
}

// signalWriter collects output and closes seen once it contains want.
type signalWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func newSignalWriter(want string) *signalWriter {
	return &signalWriter{want: want, seen: make(chan struct{})}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return n, err
}

// wait waits until the output contains want, for 10s at most.
func (w *signalWriter) wait(t *testing.T) {
	t.Helper()
	select {
	case <-w.seen:
	case <-time.After(10 * time.Second):
		t.Fatalf("no %q in the output:\n%s", w.want, w.String())
	}
}

func (w *signalWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func TestReleaseWatchesAThirdOfTheLeaseLeftPlus250ms(t *testing.T) {
	e := newReleaseEnv(t, core.Config{})
	stored, err := e.guard.StoredKey("job-1")
	require.NoError(t, err)
	_, err = e.store.Claim(context.Background(), driver.ClaimRequest{Key: stored, Token: driver.Token{1}, Lease: 1500 * time.Millisecond})
	require.NoError(t, err)

	out, err := e.run(t, "release", "job-1")
	require.NoError(t, err, "output:\n%s", out)
	left, watch := durationAfter(t, out, "lease ends in "), durationAfter(t, out, "watching the lease for up to ")
	require.Equal(t, (left/3 + 250*time.Millisecond).Round(time.Millisecond), watch, "output:\n%s", out)

	_, err = e.store.Claim(context.Background(), driver.ClaimRequest{Key: stored, Token: driver.Token{2}, Lease: time.Minute})
	require.NoError(t, err)
	out, err = e.run(t, "release", "job-1", "-watch", "30ms")
	require.ErrorContains(t, err, "no renewal in", "output:\n%s", out)
	require.Contains(t, out, "watching the lease for up to 30ms", "at most -watch")
}

// durationAfter returns the duration written in out right after prefix.
func durationAfter(t *testing.T, out, prefix string) time.Duration {
	t.Helper()
	_, rest, ok := strings.Cut(out, prefix)
	require.True(t, ok, "no %q in the output:\n%s", prefix, out)
	end := strings.IndexAny(rest, " ,)\n")
	require.Positive(t, end, "output:\n%s", out)
	d, err := time.ParseDuration(rest[:end])
	require.NoError(t, err)
	return d
}
