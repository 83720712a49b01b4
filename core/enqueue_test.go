package core_test

import (
	"context"
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
