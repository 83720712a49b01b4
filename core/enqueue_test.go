package core_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// TestShadowModePublishesEveryEnqueue: in shadow mode Enqueue publishes
// every call, the second within the window too, and reports the one
// enforcement would skip: Unguarded with WouldSkip Duplicate, Source
// "enqueue", counted in jobonce.shadow.skips. Enforcement then skips it.
func TestShadowModePublishesEveryEnqueue(t *testing.T) {
	ctx := context.Background()
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	var seen testenv.Outcomes
	reader := sdkmetric.NewManualReader()
	shadow := testenv.RedisGuardOn(t, rdb, prefix, &core.Config{
		Shadow: true, Observer: seen.Observe, MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
	})
	publishes := 0
	publish := func(context.Context) error { publishes++; return nil }

	for range 2 {
		ok, err := shadow.Enqueue(ctx, "report:7", time.Minute, publish)
		require.NoError(t, err)
		require.True(t, ok)
	}
	require.Equal(t, 2, publishes, "shadow mode publishes every call")
	events := seen.Events()
	require.Len(t, events, 1, "only the would-be skip is reported")
	require.Equal(t, core.Unguarded, events[0].Outcome)
	require.Equal(t, core.Duplicate, events[0].WouldSkip)
	require.Equal(t, "report:7", events[0].Key)
	require.Equal(t, "enqueue", events[0].Source)
	require.Equal(t, map[string]int64{"duplicate": 1}, counts(t, reader, "jobonce.shadow.skips", "outcome"))

	// Both Guards share the marker: enforcement skips the third call.
	enforce := testenv.RedisGuardOn(t, rdb, prefix, nil)
	ok, err := enforce.Enqueue(ctx, "report:7", time.Minute, publish)
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, 2, publishes)
}

// lateMarker is a memstore whose first claim is written but answered with
// an error, as when its reply is late past StoreTimeout.
type lateMarker struct {
	*memstore.Store
	once sync.Once
}

func (s *lateMarker) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimReply, error) {
	reply, err := s.Store.Claim(ctx, req)
	late := false
	s.once.Do(func() { late = true })
	if late && err == nil {
		return driver.ClaimReply{}, fmt.Errorf("read tcp: %w", os.ErrDeadlineExceeded)
	}
	return reply, err
}

// An Enqueue whose marker was written but whose answer was lost fails, and
// the caller's retry publishes: the marker the failed call may have left is
// deleted, never taken for a publish within the window.
func TestEnqueueWhoseMarkerAnswerWasLostIsPublishedOnRetry(t *testing.T) {
	g, err := core.New(&lateMarker{Store: memstore.New()}, &core.Config{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	publishes := 0
	publish := func(context.Context) error { publishes++; return nil }
	ok, err := g.Enqueue(context.Background(), "k", time.Hour, publish)
	require.ErrorIs(t, err, core.ErrStoreUnavailable)
	require.False(t, ok)
	ok, err = g.Enqueue(context.Background(), "k", time.Hour, publish)
	require.NoError(t, err)
	require.True(t, ok, "the retry was skipped as published within the window")
	require.Equal(t, 1, publishes)
}

// A publish that panics releases Enqueue's marker, so the next Enqueue
// publishes: the job was never published.
func TestEnqueuePanickingPublishReleasesItsMarker(t *testing.T) {
	g, err := core.New(memstore.New(), nil)
	require.NoError(t, err)
	ctx := context.Background()
	func() {
		defer func() { _ = recover() }()
		_, _ = g.Enqueue(ctx, "k", time.Hour, func(context.Context) error { panic("client bug") })
	}()
	var published atomic.Int32
	ok, err := g.Enqueue(ctx, "k", time.Hour, func(context.Context) error { published.Add(1); return nil })
	t.Logf("retry after the panic: published=%v err=%v", ok, err)
	require.NoError(t, err)
	require.True(t, ok, "the job was never published, yet Enqueue reports it as published within the window (false, nil)")
}

// A second Enqueue of a key whose publish is still in flight is not told
// the key was published: it gets an error matching ErrRunning with a retry
// hint, and when the first publish then fails, the next Enqueue publishes.
func TestEnqueueOfAKeyBeingPublishedIsRunning(t *testing.T) {
	g := testenv.MemGuard(t, nil)
	ctx := context.Background()
	inFlight, answer := make(chan struct{}), make(chan error)
	first := make(chan error, 1)
	go func() {
		_, err := g.Enqueue(ctx, "k", time.Hour, func(context.Context) error {
			close(inFlight)
			return <-answer
		})
		first <- err
	}()
	<-inFlight
	publishes := 0
	publish := func(context.Context) error { publishes++; return nil }
	ok, err := g.Enqueue(ctx, "k", time.Hour, publish)
	require.False(t, ok)
	require.ErrorIs(t, err, core.ErrRunning, "a publish in flight was reported as published")
	after, hinted := core.RetryAfter(err)
	require.True(t, hinted)
	require.Positive(t, after)

	boom := errors.New("broker unreachable")
	answer <- boom
	require.Same(t, boom, <-first)
	ok, err = g.Enqueue(ctx, "k", time.Hour, publish)
	require.NoError(t, err)
	require.True(t, ok, "nobody published the key")
	require.Equal(t, 1, publishes)
}

// A publisher that stops between its claim and the broker's answer (here:
// no heartbeat renews its claim) holds the key for its lease, not for the
// window: a later Enqueue publishes once the lease has lapsed.
func TestEnqueueOfAPublisherThatStoppedPublishesAfterItsLease(t *testing.T) {
	store := memstore.New()
	stopped := testenv.NewGuard(t, store, &core.Config{Lease: 200 * time.Millisecond, DisableHeartbeat: true})
	ctx := context.Background()
	never := make(chan struct{})
	t.Cleanup(func() { close(never) })
	var key string
	for attempt := 1; key == ""; attempt++ {
		inFlight, returned := make(chan struct{}), make(chan error, 1)
		go func() {
			_, err := stopped.Enqueue(ctx, fmt.Sprintf("k%d", attempt), time.Hour, func(context.Context) error {
				close(inFlight)
				<-never
				return nil
			})
			returned <- err
		}()
		select {
		case <-inFlight:
			key = fmt.Sprintf("k%d", attempt)
		case err := <-returned:
			// The claim was answered after its 200ms lease (the process was
			// held up), so nothing was published: try again.
			require.Less(t, attempt, 5, "no publish started; the last Enqueue returned %v", err)
		}
	}
	g := testenv.NewGuard(t, store, nil)
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, err := g.Enqueue(ctx, key, time.Hour, func(context.Context) error { return nil })
		if ok {
			require.NoError(t, err)
			return
		}
		require.ErrorIs(t, err, core.ErrRunning, "told published while nobody has published the key")
		require.True(t, time.Now().Before(deadline), "the stopped publisher's claim was never given up")
		time.Sleep(10 * time.Millisecond)
	}
}

// A marker an earlier release wrote (a claim held for the whole window,
// with no fingerprint) is taken for a publish within the window, not for
// a publish in flight, on memstore and on Redis.
func TestEnqueueTakesAMarkerOfTheEarlierReleaseForPublished(t *testing.T) {
	prefix := testenv.Prefix(t)
	onRedis, err := redisstore.New(testenv.Redis(t, prefix), nil)
	require.NoError(t, err)
	for name, store := range map[string]driver.Store{"memstore": memstore.New(), "redisstore": onRedis} {
		g := testenv.NewGuard(t, store, &core.Config{KeyPrefix: prefix})
		ctx := context.Background()
		skey, err := core.EnqueueKey(prefix, "k")
		require.NoError(t, err)
		_, err = store.Claim(ctx, driver.ClaimRequest{Key: skey, Token: driver.NewToken(), Lease: time.Hour})
		require.NoError(t, err)
		published := false
		ok, err := g.Enqueue(ctx, "k", time.Hour, func(context.Context) error { published = true; return nil })
		require.NoError(t, err, name)
		require.False(t, ok, name)
		require.False(t, published, name)
	}
}
