package core_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// counts sums a counter's data points by the given attribute.
func counts(t *testing.T, reader *sdkmetric.ManualReader, name, attr string) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				v, _ := dp.Attributes.Value(attribute.Key(attr))
				out[v.AsString()] += dp.Value
			}
		}
	}
	return out
}

// TestShadowMode: the Guard claims and records as usual but runs every
// delivery; those enforcement would skip run without a claim, reported as
// Unguarded with WouldSkip, and are counted in jobonce.shadow.skips.
func TestShadowMode(t *testing.T) {
	var ev testenv.Outcomes
	reader := sdkmetric.NewManualReader()
	g := testenv.NewGuard(t, memstore.New(), &core.Config{
		Shadow: true, Observer: ev.Observe, MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
	})
	ctx := context.Background()
	var runs atomic.Int32
	job := func(context.Context) ([]byte, error) { runs.Add(1); return nil, nil }

	res, err := g.Run(ctx, core.Job{Key: "k", Fingerprint: "a"}, job)
	require.NoError(t, err)
	require.Equal(t, core.Ran, res.Outcome, "the first copy runs under its claim and is recorded")
	res, err = g.Run(ctx, core.Job{Key: "k", Fingerprint: "a"}, job)
	require.NoError(t, err)
	require.Equal(t, core.Unguarded, res.Outcome, "a duplicate runs all the same")
	res, err = g.Run(ctx, core.Job{Key: "k", Fingerprint: "b"}, job)
	require.NoError(t, err)
	require.Equal(t, core.Unguarded, res.Outcome, "so does a conflict")
	res, err = g.Run(ctx, core.Job{Key: ""}, job)
	require.NoError(t, err)
	require.Equal(t, core.Unguarded, res.Outcome, "and an empty key")

	// A copy that finds its job running runs too.
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := g.Do(ctx, "long", func(context.Context) error { close(started); <-release; return nil })
		done <- err
	}()
	<-started
	claims := g.Claim(ctx, core.Job{Key: "long"})
	require.True(t, claims[0].Runs(), "the batch API runs it as well")
	res, err = claims[0].Work(ctx, job)
	require.NoError(t, err)
	require.Equal(t, core.Unguarded, res.Outcome)
	close(release)
	require.NoError(t, <-done)

	require.EqualValues(t, 5, runs.Load())
	var would []core.Outcome
	for _, e := range ev.Events() {
		if e.WouldSkip != 0 {
			require.Equal(t, core.Unguarded, e.Outcome)
			would = append(would, e.WouldSkip)
		}
	}
	require.Equal(t, []core.Outcome{core.Duplicate, core.Conflict, core.Rejected, core.Running}, would)
	require.Equal(t, map[string]int64{"duplicate": 1, "conflict": 1, "rejected": 1, "running": 1},
		counts(t, reader, "jobonce.shadow.skips", "outcome"))

	// A store failure runs the job too, without a claim.
	down := testenv.NewGuard(t, downStore{memstore.New()}, &core.Config{Shadow: true, Observer: ev.Observe})
	out, err := down.Do(ctx, "k", func(context.Context) error { runs.Add(1); return nil })
	require.NoError(t, err)
	require.Equal(t, core.Unguarded, out)
	last := ev.Events()[len(ev.Events())-1]
	require.Equal(t, core.Unavailable, last.WouldSkip)
	require.ErrorIs(t, last.Err, core.ErrStoreUnavailable)

	// The caller's own cancellation still runs nothing.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	out, err = g.Do(cctx, "k2", func(context.Context) error { runs.Add(1); return nil })
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, core.Canceled, out)
	require.EqualValues(t, 6, runs.Load())

}

// TestFailOpenRunsOneCopyOfAKeyAtATime: during an outage, FailOpen runs a
// key's copies in one Guard one at a time: while one runs unguarded, the
// others are Running, with a retry hint, and run nothing; other keys run
// beside it, and once it ends the next copy runs.
func TestFailOpenRunsOneCopyOfAKeyAtATime(t *testing.T) {
	g := testenv.NewGuard(t, downStore{memstore.New()}, &core.Config{FailOpen: true})
	ctx := context.Background()
	started, release := make(chan struct{}), make(chan struct{})
	first := make(chan core.Outcome, 1)
	go func() {
		out, _ := g.Do(ctx, "hot", func(context.Context) error {
			close(started)
			<-release
			return nil
		})
		first <- out
	}()
	<-started

	var ran atomic.Int32
	for range 100 {
		out, err := g.Do(ctx, "hot", func(context.Context) error { ran.Add(1); return nil })
		require.Equal(t, core.Running, out)
		require.ErrorIs(t, err, core.ErrRunning)
		after, hinted := core.RetryAfter(err)
		require.True(t, hinted)
		require.Positive(t, after)
	}
	require.Zero(t, ran.Load(), "a copy ran beside the one running unguarded")
	out, err := g.Do(ctx, "cold", func(context.Context) error { return nil })
	require.NoError(t, err)
	require.Equal(t, core.Unguarded, out, "another key runs")

	close(release)
	require.Equal(t, core.Unguarded, <-first)
	out, err = g.Do(ctx, "hot", func(context.Context) error { ran.Add(1); return nil })
	require.NoError(t, err)
	require.Equal(t, core.Unguarded, out, "the next copy runs once the first ended")
	require.EqualValues(t, 1, ran.Load())
}
