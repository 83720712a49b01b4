package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/redisops"
	"github.com/jobonce/jobonce/internal/testenv"
)

// releaseEnv is a Guard on the test Redis under a prefix of its own, and the
// CLI's arguments for that prefix and its lease.
type releaseEnv struct {
	client *redis.Client
	store  *redisstore.Store
	guard  *core.Guard
	prefix string
	lease  time.Duration
}

func newReleaseEnv(t *testing.T, cfg core.Config) releaseEnv {
	return newReleaseEnvOn(t, cfg, func(s *redisstore.Store) driver.Store { return s })
}

// newReleaseEnvOn is newReleaseEnv with a Guard on wrap's store.
func newReleaseEnvOn(t *testing.T, cfg core.Config, wrap func(*redisstore.Store) driver.Store) releaseEnv {
	prefix := testenv.Prefix(t)
	client := testenv.Redis(t, prefix)
	store, err := redisstore.New(client, nil)
	require.NoError(t, err)
	cfg.KeyPrefix = prefix
	g, err := core.New(wrap(store), &cfg)
	require.NoError(t, err)
	return releaseEnv{client: client, store: store, guard: g, prefix: prefix, lease: cmp.Or(cfg.Lease, 30*time.Second)}
}

// args are the CLI's arguments for e's Guard, then a: its -lease for
// release (a later -lease in a wins).
func (e releaseEnv) args(a ...string) []string {
	args := []string{"-redis", testenv.RedisURL(), "-prefix", e.prefix}
	if slices.Contains(a, "release") {
		args = append(args, "-lease", e.lease.String())
	}
	return append(args, a...)
}

func (e releaseEnv) run(t *testing.T, a ...string) (string, error) {
	var out bytes.Buffer
	err := run(context.Background(), e.args(a...), nil, &out)
	return out.String(), err
}

func (e releaseEnv) inspect(t *testing.T, key string) redisops.Record {
	stored, err := e.guard.StoredKey(key)
	require.NoError(t, err)
	rec, err := redisops.Inspect(context.Background(), e.client, stored)
	require.NoError(t, err)
	return rec
}

// claim writes a claim on key held by token, as if it had been taken age
// ago and had left of its lease now: its fence moved age back, its TTL left.
// With age+left equal to e.lease it was never renewed; with more, it was.
func (e releaseEnv) claim(t *testing.T, key string, token driver.Token, age, left time.Duration) {
	t.Helper()
	ctx := context.Background()
	stored, err := e.guard.StoredKey(key)
	require.NoError(t, err)
	reply, err := e.store.Claim(ctx, driver.ClaimRequest{Key: stored, Token: token, Lease: left})
	require.NoError(t, err)
	require.Equal(t, driver.StateClaimed, reply.State)
	e.age(t, key, age, left)
}

// age moves the fence of key's claim age back and sets its lease left, as
// if age had passed and the holder had renewed it to left.
func (e releaseEnv) age(t *testing.T, key string, age, left time.Duration) {
	t.Helper()
	ctx := context.Background()
	stored, err := e.guard.StoredKey(key)
	require.NoError(t, err)
	v, err := e.client.Get(ctx, stored).Bytes()
	require.NoError(t, err)
	require.Equal(t, byte('F'), v[0], "a fenced claim")
	fence := binary.BigEndian.Uint64(v[17:25])
	binary.BigEndian.PutUint64(v[17:25], fence-uint64(age.Microseconds()))
	require.NoError(t, e.client.Set(ctx, stored, v, left).Err())
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

// requireHeld asserts that the claim before still holds key, that its
// holder's job runs on, and that a second copy does not run beside it.
func (e releaseEnv) requireHeld(t *testing.T, key string, before redisops.Record, jobCtx context.Context) {
	t.Helper()
	after := e.inspect(t, key)
	require.Equal(t, driver.StateRunning, after.State, "the claim is still held")
	require.Equal(t, before.Token, after.Token, "by the same holder")
	require.NoError(t, jobCtx.Err(), "the holder kept its lease")
	ran := false
	_, err := e.guard.Do(context.Background(), key, func(context.Context) error { ran = true; return nil })
	require.ErrorIs(t, err, core.ErrRunning, "a second copy does not run while the first holds the claim")
	require.False(t, ran)
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
	require.ErrorContains(t, err, "is renewed while its job runs: the claim ends with the job")
	require.NotContains(t, err.Error(), "expires by itself", "a renewed claim does not")
	require.ErrorContains(t, err, "-force")
	require.Contains(t, out, "watch")
	require.NotContains(t, out, "released")
	e.requireHeld(t, "job-1", before, jobCtx)

	out, err = e.run(t, "-force", "release", "job-1")
	require.NoError(t, err, "output:\n%s", out)
	require.Contains(t, out, "released")
	require.Contains(t, out, "alive and renewing", "-force says the claim it released was live")
	o, err := e.guard.Do(context.Background(), "job-1", func(context.Context) error { return nil })
	require.NoError(t, err)
	require.Equal(t, core.Ran, o, "-force lets the next copy run")
	close(stop)
	require.Equal(t, core.LeaseLost, <-done, "the forced-out holder learns it lost its claim")
}

// A Guard with Config.DisableHeartbeat holds its claim for the whole lease
// without renewing it, as a holder that died before its first renewal
// leaves it: release cannot tell them apart, so it keeps the claim.
func TestReleaseRefusesAClaimThatWasNeverRenewed(t *testing.T) {
	e := newReleaseEnv(t, core.Config{Lease: 3 * time.Second, DisableHeartbeat: true})
	stop := make(chan struct{})
	started, done := holdJob(t, e.guard, "job-1", stop)
	jobCtx := <-started
	before := e.inspect(t, "job-1")

	out, err := e.run(t, "release", "job-1")
	require.ErrorContains(t, err, "never renewed", "output:\n%s", out)
	require.ErrorContains(t, err, "died before its first renewal, runs with Config.DisableHeartbeat, or is cut off from Redis")
	require.ErrorContains(t, err, "-force deletes it now, at the risk of a second copy")
	left := durationAfter(t, err.Error(), "the claim expires by itself in ")
	require.Greater(t, left, time.Second, "the lease left: 3s less the 1.25s watched for a first renewal")
	require.LessOrEqual(t, left, 1750*time.Millisecond)
	require.Contains(t, out, "watching the lease for up to", "a young claim is watched for its first renewal")
	require.NotContains(t, out, "released")
	e.requireHeld(t, "job-1", before, jobCtx)

	close(stop)
	require.Equal(t, core.Ran, <-done, "the holder completes its job")
}

// stallingStore is a store whose Extend, after its first renewal, hangs
// until the caller gives up: a holder that renewed its claim and then
// stopped, as one whose process froze or died.
type stallingStore struct {
	*redisstore.Store
	extends atomic.Int32
	renewed chan struct{} // closed once the first renewal succeeded
}

func (s *stallingStore) Extend(ctx context.Context, key string, token driver.Token, lease time.Duration) error {
	if s.extends.Add(1) > 1 {
		<-ctx.Done()
		return ctx.Err()
	}
	err := s.Store.Extend(ctx, key, token, lease)
	close(s.renewed)
	return err
}

func TestReleaseRefusesAClaimWhoseHeartbeatStoppedUntilForced(t *testing.T) {
	stalling := &stallingStore{renewed: make(chan struct{})}
	e := newReleaseEnvOn(t, core.Config{Lease: 3 * time.Second}, func(s *redisstore.Store) driver.Store {
		stalling.Store = s
		return stalling
	})
	stop := make(chan struct{})
	started, done := holdJob(t, e.guard, "job-1", stop)
	jobCtx := <-started
	<-stalling.renewed
	before := e.inspect(t, "job-1")

	out, err := e.run(t, "release", "job-1")
	require.ErrorContains(t, err, "refused: no renewal seen in", "output:\n%s", out)
	require.ErrorContains(t, err, "its holder is probably dead, cut off from Redis, or runs with Config.DisableHeartbeat")
	require.ErrorContains(t, err, "the claim expires by itself in")
	require.ErrorContains(t, err, "-force deletes it now")
	require.Equal(t, int32(2), stalling.extends.Load(), "release watched through the renewal that hung")
	require.NotContains(t, out, "released")
	e.requireHeld(t, "job-1", before, jobCtx)

	out, err = e.run(t, "-force", "-watch", "0", "release", "job-1")
	require.NoError(t, err, "output:\n%s", out)
	require.NotContains(t, out, "watching", "-watch 0 deletes without watching")
	require.Contains(t, out, "released although not watched (-watch 0): its holder is probably dead")
	require.Equal(t, driver.State(0), e.inspect(t, "job-1").State)
	o, err := e.guard.Do(context.Background(), "job-1", func(context.Context) error { return nil })
	require.NoError(t, err)
	require.Equal(t, core.Ran, o, "the next copy runs")
	close(stop)
	require.Equal(t, core.LeaseLost, <-done)
}

func TestReleaseRefusesADeadClaimNeverRenewedUntilForced(t *testing.T) {
	e := newReleaseEnv(t, core.Config{Lease: 20 * time.Second})
	// Taken a second ago by a holder that crashed before its first renewal;
	// its lease outlasts both short watches below, even on a loaded machine.
	e.claim(t, "job-1", driver.Token{1, 2, 3}, time.Second, 19*time.Second)

	out, err := e.run(t, "-watch", "300ms", "release", "job-1")
	require.ErrorContains(t, err, "never renewed", "output:\n%s", out)
	require.ErrorContains(t, err, "expires by itself in")
	require.ErrorContains(t, err, "-force deletes it now")
	require.Equal(t, driver.StateRunning, e.inspect(t, "job-1").State)

	out, err = e.run(t, "-watch", "300ms", "-force", "release", "job-1")
	require.NoError(t, err, "output:\n%s", out)
	require.Contains(t, out, "watching", "-force watches too")
	require.Contains(t, out, "released although no renewal seen in")
	require.Contains(t, out, "never renewed")
	require.Equal(t, driver.State(0), e.inspect(t, "job-1").State)
	o, err := e.guard.Do(context.Background(), "job-1", func(context.Context) error { return nil })
	require.NoError(t, err)
	require.Equal(t, core.Ran, o)
}

func TestReleaseRefusesAClaimWithoutAFence(t *testing.T) {
	e := newReleaseEnv(t, core.Config{})
	stored, err := e.guard.StoredKey("job-1")
	require.NoError(t, err)
	tok := driver.Token{1}
	require.NoError(t, e.client.Set(context.Background(), stored, "R"+string(tok[:])+"fp", time.Minute).Err())

	for _, force := range []string{"-force=false", "-force"} {
		out, err := e.run(t, force, "release", "job-1")
		require.ErrorContains(t, err, "fence", "%s, output:\n%s", force, out)
		require.NotContains(t, out, "released", force)
		require.Equal(t, driver.StateRunning, e.inspect(t, "job-1").State, force)
	}
}

func TestReleaseNamesTheWatchThatWouldSeeARenewal(t *testing.T) {
	e := newReleaseEnv(t, core.Config{Lease: time.Minute})
	// Renewed 30s after its claim, with its whole lease left.
	e.claim(t, "job-1", driver.Token{1}, 30*time.Second, time.Minute)

	out, err := e.run(t, "-watch", "50ms", "release", "job-1")
	require.ErrorContains(t, err, "no renewal seen in", "output:\n%s", out)
	require.ErrorContains(t, err, "-watch 20.", "it names the watch that could tell")
	require.ErrorContains(t, err, "probably dead")
	require.Equal(t, driver.StateRunning, e.inspect(t, "job-1").State)

	out, err = e.run(t, "-force", "-watch", "50ms", "release", "job-1")
	require.NoError(t, err, "output:\n%s", out)
	require.Contains(t, out, "released although no renewal seen in")
	require.Equal(t, driver.State(0), e.inspect(t, "job-1").State)

	// Just taken: a live holder first renews it 20s after the claim.
	e.claim(t, "job-1", driver.Token{2}, 0, time.Minute)
	out, err = e.run(t, "-watch", "50ms", "release", "job-1")
	require.ErrorContains(t, err, "never renewed", "output:\n%s", out)
	require.ErrorContains(t, err, "-watch 20.")
	require.Equal(t, driver.StateRunning, e.inspect(t, "job-1").State)
}

// -lease only tells a claim renewed before from one never renewed in what
// release says: a -lease shorter than the Guard's makes a never-renewed
// claim look renewed, and release still keeps it.
func TestReleaseWithAShorterLeaseStillKeepsTheClaim(t *testing.T) {
	e := newReleaseEnv(t, core.Config{Lease: 3 * time.Second, DisableHeartbeat: true})
	stop := make(chan struct{})
	started, done := holdJob(t, e.guard, "job-1", stop)
	jobCtx := <-started
	before := e.inspect(t, "job-1")

	out, err := e.run(t, "release", "job-1", "-lease", "1s")
	require.ErrorContains(t, err, "refused: no renewal seen in", "output:\n%s", out)
	require.ErrorContains(t, err, "runs with Config.DisableHeartbeat")
	e.requireHeld(t, "job-1", before, jobCtx)
	close(stop)
	require.Equal(t, core.Ran, <-done)
}

func TestReleaseLeavesTheDoneMarkerOfAJobThatFinishesWhileItWatches(t *testing.T) {
	// A young claim is watched for its first renewal; the holder has no
	// heartbeat, so only its done marker can end the watch early.
	e := newReleaseEnv(t, core.Config{Lease: 3 * time.Second, DisableHeartbeat: true})
	stop := make(chan struct{})
	started, done := holdJob(t, e.guard, "job-1", stop)
	<-started

	w := newSignalWriter("watching")
	errc := make(chan error, 1)
	go func() {
		errc <- run(context.Background(), e.args("release", "job-1"), nil, w)
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
	e := newReleaseEnv(t, core.Config{Lease: 3 * time.Second})
	stored, err := e.guard.StoredKey("job-1")
	require.NoError(t, err)
	ctx := context.Background()
	first, second := driver.Token{1}, driver.Token{2}
	_, err = e.store.Claim(ctx, driver.ClaimRequest{Key: stored, Token: first, Lease: 3 * time.Second})
	require.NoError(t, err)

	w := newSignalWriter("watching")
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, e.args("-force", "release", "job-1"), nil, w)
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
	e := newReleaseEnv(t, core.Config{Lease: time.Second})
	stored, err := e.guard.StoredKey("job-1")
	require.NoError(t, err)
	ctx := context.Background()
	first, second := driver.Token{1}, driver.Token{2}
	e.claim(t, "job-1", first, time.Second, time.Second)
	keys := &redisKeys{client: e.client, store: e.store}
	rec, err := keys.inspect(ctx, stored)
	require.NoError(t, err)

	// The claim changes hands between the last look and the delete.
	swap := swapBeforeRelease{redisKeys: keys, swap: func() {
		require.NoError(t, e.store.Release(ctx, stored, first))
		_, err := e.store.Claim(ctx, driver.ClaimRequest{Key: stored, Token: second, Lease: time.Minute})
		require.NoError(t, err)
	}}
	var out bytes.Buffer
	err = release(ctx, swap, &out, stored, rec, releaseOptions{force: true, watch: time.Second, lease: e.lease})
	require.ErrorContains(t, err, "the claim changed since it was read", "output:\n%s", out.String())
	after := e.inspect(t, "job-1")
	require.Equal(t, driver.StateRunning, after.State)
	require.Equal(t, second, after.Token, "the claim taken meanwhile is kept")
}

// swapBeforeRelease runs swap just before each release it passes on.
type swapBeforeRelease struct {
	*redisKeys
	swap func()
}

func (s swapBeforeRelease) release(ctx context.Context, key string, token driver.Token) error {
	s.swap()
	return s.redisKeys.release(ctx, key, token)
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
	e := newReleaseEnv(t, core.Config{Lease: 1500 * time.Millisecond})
	e.claim(t, "job-1", driver.Token{1}, time.Second, 1500*time.Millisecond)

	out, err := e.run(t, "release", "job-1")
	require.ErrorContains(t, err, "refused", "output:\n%s", out)
	left, watch := durationAfter(t, out, "lease ends in "), durationAfter(t, out, "watching the lease for up to ")
	require.Equal(t, (left/3 + 250*time.Millisecond).Round(time.Millisecond), watch, "output:\n%s", out)

	e.claim(t, "job-3", driver.Token{2}, 30*time.Second, time.Minute)
	out, err = e.run(t, "release", "job-3", "-watch", "30ms", "-lease", "1m")
	require.ErrorContains(t, err, "no renewal seen in", "output:\n%s", out)
	require.Contains(t, out, "watching the lease for up to 30ms", "at most -watch")

	// Just taken: watched until a third of the lease, plus 250ms, after
	// the claim.
	e.claim(t, "job-2", driver.Token{3}, 0, time.Minute)
	out, err = e.run(t, "release", "job-2", "-watch", "30ms", "-lease", "1m")
	require.Error(t, err, "output:\n%s", out)
	require.Contains(t, out, "watching the lease for up to 30ms")
	require.ErrorContains(t, err, "-watch 20.", "output:\n%s", out)
}

// durationAfter returns the duration written in out right after prefix.
func durationAfter(t *testing.T, out, prefix string) time.Duration {
	t.Helper()
	_, rest, ok := strings.Cut(out, prefix)
	require.True(t, ok, "no %q in the output:\n%s", prefix, out)
	end := strings.IndexAny(rest, " ,;)\n")
	require.Positive(t, end, "output:\n%s", out)
	d, err := time.ParseDuration(rest[:end])
	require.NoError(t, err)
	return d
}

// A holder alive but cut off from Redis (a partition between its worker and
// the server, which the operator still reaches) runs its job on until its
// lease ends by its own clock, and looks the same as a dead one: release
// refuses its claim, and no second copy runs beside it.
func TestReleaseKeepsTheClaimOfALiveHolderCutOffFromRedis(t *testing.T) {
	e := newReleaseEnv(t, core.Config{Lease: 3 * time.Second})
	proxy := testenv.StartProxy(t, "127.0.0.1:0", "127.0.0.1:6379")
	opt, err := redis.ParseURL(testenv.RedisURL())
	require.NoError(t, err)
	opt.Addr = proxy.Addr()
	holderClient := redis.NewClient(opt)
	t.Cleanup(func() { _ = holderClient.Close() })
	holderStore, err := redisstore.New(holderClient, nil)
	require.NoError(t, err)
	holder, err := core.New(holderStore, &core.Config{Lease: 3 * time.Second, KeyPrefix: e.prefix, StoreTimeout: 500 * time.Millisecond})
	require.NoError(t, err)

	var running atomic.Int32
	stop := make(chan struct{})
	started := make(chan context.Context, 1)
	done := make(chan core.Outcome, 1)
	go func() {
		o, _ := holder.Do(context.Background(), "job-1", func(ctx context.Context) error {
			running.Add(1)
			defer running.Add(-1)
			started <- ctx
			select {
			case <-stop:
			case <-ctx.Done():
			}
			return nil
		})
		done <- o
	}()
	jobCtx := <-started
	// The holder renews once (at Lease/3), then is cut off.
	require.Eventually(t, func() bool {
		rec := e.inspect(t, "job-1")
		return rec.Age+rec.TTL > e.lease+leaseTolerance(e.lease)
	}, 5*time.Second, 10*time.Millisecond, "the holder renews its claim")
	proxy.Cut()

	out, err := e.run(t, "release", "job-1")
	require.ErrorContains(t, err, "refused: no renewal seen in", "output:\n%s", out)
	require.ErrorContains(t, err, "probably dead, cut off from Redis")
	require.ErrorContains(t, err, "expires by itself in")
	require.ErrorContains(t, err, "-force deletes it now")
	require.NoError(t, jobCtx.Err(), "the cut-off holder still runs its job")

	var both int32
	_, err = e.guard.Do(context.Background(), "job-1", func(context.Context) error {
		both = running.Load() + 1
		return nil
	})
	require.ErrorIs(t, err, core.ErrRunning, "the claim is kept")
	require.Less(t, both, int32(2), "no two copies run at once")
	close(stop)
	<-done
}

// A fence is written with the clock of the server that took the claim; after
// a failover, release reads its age against another server's TIME. A clock
// skew makes a never-renewed claim look renewed (its fence moved 1s back
// here, as a primary whose clock ran 1s behind would have written it):
// release keeps it, and no second copy runs beside its holder.
func TestReleaseKeepsANeverRenewedClaimThatClockSkewMakesLookRenewed(t *testing.T) {
	e := newReleaseEnv(t, core.Config{Lease: 3 * time.Second, DisableHeartbeat: true})
	var running atomic.Int32
	stop := make(chan struct{})
	started := make(chan struct{})
	done := make(chan core.Outcome, 1)
	go func() {
		o, _ := e.guard.Do(context.Background(), "job-1", func(ctx context.Context) error {
			running.Add(1)
			defer running.Add(-1)
			close(started)
			select {
			case <-stop:
			case <-ctx.Done():
			}
			return nil
		})
		done <- o
	}()
	<-started
	rec := e.inspect(t, "job-1")
	e.age(t, "job-1", time.Second, rec.TTL)

	out, err := e.run(t, "release", "job-1")
	require.ErrorContains(t, err, "refused: no renewal seen in", "output:\n%s", out)
	require.ErrorContains(t, err, "runs with Config.DisableHeartbeat")
	var both int32
	_, err = e.guard.Do(context.Background(), "job-1", func(context.Context) error { both = running.Load() + 1; return nil })
	require.ErrorIs(t, err, core.ErrRunning, "the claim is kept")
	require.Less(t, both, int32(2), "no two copies run at once")
	close(stop)
	require.Equal(t, core.Ran, <-done)
}
