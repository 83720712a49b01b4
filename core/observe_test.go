package core_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// TestOutcomesPerConsumer: outcome metrics carry the consumer, the source
// and the kind, and a Guard keeps the kinds it counts bounded.
func TestOutcomesPerConsumer(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	g := testenv.NewGuard(t, memstore.New(), &core.Config{
		Consumer: "billing", MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
	})
	ctx := context.Background()
	nop := func(context.Context) ([]byte, error) { return nil, nil }
	for range 2 {
		_, err := g.Run(ctx, core.Job{Key: "a", Kind: "invoice", Source: "sqs"}, nop)
		require.NoError(t, err)
	}
	for i := range 150 {
		_, err := g.Run(ctx, core.Job{Key: fmt.Sprint("many-", i), Kind: fmt.Sprint("kind-", i), Source: "asynq"}, nop)
		require.NoError(t, err)
	}
	byKind := counts(t, reader, "jobonce.outcomes", "jobonce.kind")
	require.EqualValues(t, 2, byKind["invoice"])
	require.EqualValues(t, 51, byKind["other"], "kinds beyond the first 100 are counted as other")
	require.Len(t, byKind, 101)
	require.Equal(t, map[string]int64{"billing": 152}, counts(t, reader, "jobonce.outcomes", "jobonce.consumer"))
	require.Equal(t, map[string]int64{"sqs": 2, "asynq": 99, "other": 51}, counts(t, reader, "jobonce.outcomes", "jobonce.source"))

	// New sources past the bound fold into "other" too.
	for i := range 50 {
		_, err := g.Run(ctx, core.Job{Key: fmt.Sprint("tenant-", i), Kind: "k", Source: fmt.Sprint("tenant-", i)}, nop)
		require.NoError(t, err)
	}
	require.EqualValues(t, 101, counts(t, reader, "jobonce.outcomes", "jobonce.source")["other"])
}

// TestDuplicateLagHistogram: a duplicate's lag is recorded in
// jobonce.duplicate.lag, in seconds.
func TestDuplicateLagHistogram(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	g := testenv.NewGuard(t, memstore.New(), &core.Config{
		Retention: time.Hour, MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
	})
	ctx := context.Background()
	nop := func(context.Context) error { return nil }
	_, err := g.Do(ctx, "k", nop)
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond) // the redelivery's delay, not a synchronisation
	out, err := g.Do(ctx, "k", nop)
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, out)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	var lags []metricdata.HistogramDataPoint[float64]
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "jobonce.duplicate.lag" {
				lags = append(lags, m.Data.(metricdata.Histogram[float64]).DataPoints...)
			}
		}
	}
	require.Len(t, lags, 1)
	require.EqualValues(t, 1, lags[0].Count)
	require.GreaterOrEqual(t, lags[0].Sum, 0.04)
	require.Less(t, lags[0].Sum, 60.0)
}

// meterReader returns a MeterProvider measured by the returned reader.
func meterReader() (*sdkmetric.MeterProvider, *sdkmetric.ManualReader) {
	reader := sdkmetric.NewManualReader()
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), reader
}

// instrument returns what reader holds of the instrument name, and false
// when nothing was measured with it.
func instrument(t *testing.T, reader *sdkmetric.ManualReader, name string) (metricdata.Metrics, bool) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// histogram returns the data points of the histogram name.
func histogram(t *testing.T, reader *sdkmetric.ManualReader, name string) []metricdata.HistogramDataPoint[float64] {
	t.Helper()
	m, ok := instrument(t, reader, name)
	require.True(t, ok, "%s was measured", name)
	return m.Data.(metricdata.Histogram[float64]).DataPoints
}

// gauge returns the value of the gauge name, summed over its attribute
// sets (an up-down counter or a gauge), and false when it was never set.
func gauge(t *testing.T, reader *sdkmetric.ManualReader, name string) (float64, bool) {
	t.Helper()
	m, ok := instrument(t, reader, name)
	if !ok {
		return 0, false
	}
	var v float64
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, dp := range d.DataPoints {
			v += float64(dp.Value)
		}
	case metricdata.Gauge[float64]:
		for _, dp := range d.DataPoints {
			v += dp.Value
		}
	default:
		t.Fatalf("%s is a %T", name, m.Data)
	}
	return v, true
}

// eventually polls cond until it holds, failing the test after a deadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestHistogramBucketsFitWhatTheyMeasure: job durations are bucketed from
// a millisecond to hours and duplicate lags up to twice the longest
// Retention, with half, all and twice the default Retention as edges.
func TestHistogramBucketsFitWhatTheyMeasure(t *testing.T) {
	mp, reader := meterReader()
	g := testenv.NewGuard(t, memstore.New(), &core.Config{MeterProvider: mp})
	ctx := context.Background()
	for range 2 {
		_, err := g.Do(ctx, "k", func(context.Context) error { return nil })
		require.NoError(t, err)
	}

	runs := histogram(t, reader, "jobonce.run.duration")
	require.Len(t, runs, 1)
	require.Equal(t, 0.001, runs[0].Bounds[0])
	require.Equal(t, 4*time.Hour.Seconds(), runs[0].Bounds[len(runs[0].Bounds)-1])
	require.Contains(t, runs[0].Bounds, 0.01, "jobs under 5s are told apart")

	lags := histogram(t, reader, "jobonce.duplicate.lag")
	require.Len(t, lags, 1)
	require.Equal(t, 0.001, lags[0].Bounds[0])
	for _, edge := range []time.Duration{12 * time.Hour, 24 * time.Hour, 48 * time.Hour} {
		require.Contains(t, lags[0].Bounds, edge.Seconds())
	}
	require.GreaterOrEqual(t, lags[0].Bounds[len(lags[0].Bounds)-1], (14 * 24 * time.Hour).Seconds())
}

// TestLeaseAndRetentionGauges: a Guard's Lease and Retention are gauges in
// seconds, under its consumer, for rules that compare lags with them.
func TestLeaseAndRetentionGauges(t *testing.T) {
	mp, reader := meterReader()
	testenv.NewGuard(t, memstore.New(), &core.Config{
		Lease: 10 * time.Second, Retention: time.Hour, Consumer: "billing", MeterProvider: mp,
	})
	for name, want := range map[string]float64{"jobonce.lease": 10, "jobonce.retention": 3600} {
		m, ok := instrument(t, reader, name)
		require.True(t, ok, name)
		require.Equal(t, "s", m.Unit)
		points := m.Data.(metricdata.Gauge[float64]).DataPoints
		require.Len(t, points, 1)
		require.Equal(t, want, points[0].Value, name)
		consumer, _ := points[0].Attributes.Value("jobonce.consumer")
		require.Equal(t, "billing", consumer.AsString())
	}
}

// TestClaimsHeldGoesUpAndDown: a claim counts as held while its job runs
// and no longer once it ended, however it ended.
func TestClaimsHeldGoesUpAndDown(t *testing.T) {
	mp, reader := meterReader()
	g := testenv.NewGuard(t, memstore.New(), &core.Config{MeterProvider: mp})
	ctx := context.Background()
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := g.Run(ctx, core.Job{Key: "slow", Kind: "invoice", Source: "sqs"}, func(context.Context) ([]byte, error) {
			close(started)
			<-release
			return nil, nil
		})
		done <- err
	}()
	<-started
	held, _ := gauge(t, reader, "jobonce.claims.held")
	require.Equal(t, 1.0, held)
	m, _ := instrument(t, reader, "jobonce.claims.held")
	attrs := m.Data.(metricdata.Sum[int64]).DataPoints[0].Attributes
	kind, _ := attrs.Value("jobonce.kind")
	require.Equal(t, "invoice", kind.AsString())
	require.False(t, attrs.HasValue("outcome"), "a held claim has no outcome yet")
	close(release)
	require.NoError(t, <-done)
	held, _ = gauge(t, reader, "jobonce.claims.held")
	require.Zero(t, held)

	_, err := g.Do(ctx, "fails", func(context.Context) error { return errors.New("boom") })
	require.Error(t, err)
	require.Panics(t, func() {
		_, _ = g.Do(ctx, "panics", func(context.Context) error { panic("boom") })
	})
	claims := g.Claim(ctx, core.Job{Key: "a"}, core.Job{Key: "b"})
	for _, c := range claims {
		_, err := c.Work(ctx, func(context.Context) ([]byte, error) { return nil, nil })
		require.NoError(t, err)
	}
	held, _ = gauge(t, reader, "jobonce.claims.held")
	require.Equal(t, 2.0, held, "claims whose markers await Finish are held")
	require.Equal(t, []core.Outcome{core.Ran, core.Ran}, g.Finish(ctx, claims...))
	held, _ = gauge(t, reader, "jobonce.claims.held")
	require.Zero(t, held)
}

// TestCopiesWaitingGoesUpAndDown: a copy that waits for its running copy
// counts as waiting until its wait ends, and the time it waited is
// recorded under the outcome it then had.
func TestCopiesWaitingGoesUpAndDown(t *testing.T) {
	mp, reader := meterReader()
	g := testenv.NewGuard(t, memstore.New(), &core.Config{MeterProvider: mp})
	ctx := context.Background()
	started, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := g.Do(ctx, "k", func(context.Context) error {
			close(started)
			<-release
			return nil
		})
		first <- err
	}()
	<-started
	copyDone := make(chan core.Outcome, 1)
	go func() {
		res, _ := g.Run(ctx, core.Job{Key: "k", WaitUntil: time.Now().Add(time.Minute)}, func(context.Context) ([]byte, error) {
			return nil, nil
		})
		copyDone <- res.Outcome
	}()
	eventually(t, "the copy waits", func() bool {
		v, _ := gauge(t, reader, "jobonce.copies.waiting")
		return v == 1
	})
	close(release)
	require.NoError(t, <-first)
	require.Equal(t, core.Duplicate, <-copyDone)
	waiting, _ := gauge(t, reader, "jobonce.copies.waiting")
	require.Zero(t, waiting)

	waits := histogram(t, reader, "jobonce.wait.duration")
	require.Len(t, waits, 1)
	require.EqualValues(t, 1, waits[0].Count)
	require.Positive(t, waits[0].Sum)
	outcome, _ := waits[0].Attributes.Value("outcome")
	require.Equal(t, "duplicate", outcome.AsString())
	require.Equal(t, 0.001, waits[0].Bounds[0])
	require.Equal(t, 300.0, waits[0].Bounds[len(waits[0].Bounds)-1])
}

// TestFailOpenRunsAreCountedApart: a job FailOpen runs unguarded because
// the store could not be reached is counted in jobonce.fail_open, by the
// outcome it had (unguarded, or failed), apart from the jobs unguarded by
// configuration, which the same outcome counts, so that an outage under
// FailOpen can be alerted on; so is a publish Enqueue makes under FailOpen.
func TestFailOpenRunsAreCountedApart(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	g := testenv.NewGuard(t, downStore{memstore.New()}, &core.Config{FailOpen: true, MeterProvider: mp})
	ctx := context.Background()
	nop := func(context.Context) ([]byte, error) { return nil, nil }
	res, err := g.Run(ctx, core.Job{Key: "a", Kind: "invoice", Source: "sqs"}, nop)
	require.NoError(t, err)
	require.Equal(t, core.Unguarded, res.Outcome)
	_, err = g.Run(ctx, core.Job{Key: "b", Kind: "invoice", Source: "sqs"}, func(context.Context) ([]byte, error) { return nil, errors.New("boom") })
	require.Error(t, err)
	_, err = g.Run(ctx, core.Job{Key: "c", Kind: "invoice", Source: "sqs", Unguarded: true}, nop)
	require.NoError(t, err)

	published, err := g.Enqueue(ctx, "e", time.Minute, func(context.Context) error { return nil })
	require.NoError(t, err)
	require.True(t, published)

	require.Equal(t, map[string]int64{"unguarded": 2, "failed": 1}, counts(t, reader, "jobonce.outcomes", "outcome"))
	require.Equal(t, map[string]int64{"unguarded": 2, "failed": 1}, counts(t, reader, "jobonce.fail_open", "outcome"))
	require.Equal(t, map[string]int64{"sqs": 2, "enqueue": 1}, counts(t, reader, "jobonce.fail_open", "jobonce.source"))
}

// scriptedStore answers claims with its replies in turn, repeating the
// last; its other calls succeed.
type scriptedStore struct {
	mu      sync.Mutex
	replies []driver.ClaimReply
}

func (s *scriptedStore) Claim(context.Context, driver.ClaimRequest) (driver.ClaimReply, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.replies[0]
	if len(s.replies) > 1 {
		s.replies = s.replies[1:]
	}
	return r, nil
}

func (s *scriptedStore) Extend(context.Context, string, driver.Token, time.Duration) error {
	return nil
}
func (s *scriptedStore) Complete(context.Context, driver.CompleteRequest) error { return nil }
func (s *scriptedStore) Release(context.Context, string, driver.Token) error    { return nil }

// TestStaleClaimsCounted: a copy that finds its job's claim not renewed
// for two heartbeat periods (under a third of Lease left) is counted in
// jobonce.claims.stale by the outcome it then had, also when it waited
// and took the key over; a claim renewed on time, or a key held by a
// transaction (no fence), is not.
func TestStaleClaimsCounted(t *testing.T) {
	const lease = 30 * time.Second
	running := func(left time.Duration, fence int64) driver.ClaimReply {
		return driver.ClaimReply{State: driver.StateRunning, Remaining: left, Fence: fence}
	}
	for _, tc := range []struct {
		name    string
		replies []driver.ClaimReply
		wait    bool
		want    map[string]int64
	}{
		{"stale", []driver.ClaimReply{running(lease/10, 1)}, false, map[string]int64{"running": 1}},
		{"renewed", []driver.ClaimReply{running(lease*2/3, 1)}, false, map[string]int64{}},
		{"transaction", []driver.ClaimReply{running(lease/10, 0)}, false, map[string]int64{}},
		{"taken over", []driver.ClaimReply{running(lease/10, 1), {State: driver.StateClaimed, Fence: 2}}, true, map[string]int64{"ran": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mp, reader := meterReader()
			g := testenv.NewGuard(t, &scriptedStore{replies: tc.replies}, &core.Config{Lease: lease, MeterProvider: mp})
			job := core.Job{Key: "k"}
			if tc.wait {
				job.WaitUntil = time.Now().Add(time.Minute)
			}
			_, _ = g.Run(context.Background(), job, func(context.Context) ([]byte, error) { return nil, nil })
			require.Equal(t, tc.want, counts(t, reader, "jobonce.claims.stale", "outcome"))
		})
	}
}

// lapsingStore holds its key for another claim until until; it reports
// that claim's remaining lease as running out at expires (a release ends
// it earlier), then lets the key be claimed.
type lapsingStore struct {
	scriptedStore
	until, expires time.Time
}

func (s *lapsingStore) Claim(context.Context, driver.ClaimRequest) (driver.ClaimReply, error) {
	if now := time.Now(); now.Before(s.until) {
		return driver.ClaimReply{State: driver.StateRunning, Remaining: s.expires.Sub(now), Fence: 1}, nil
	}
	return driver.ClaimReply{State: driver.StateClaimed, Fence: 2}, nil
}

// TestTakeoverAfterLapseCountedStale: a copy that waits for a running
// claim and claims the key once that claim's lease ran out took over a
// claim its holder stopped renewing, and is counted stale; one that claims
// it after a release, before the lease ran out, is not. (The copies'
// heartbeat is off, so a claim with little lease left is no sign.)
func TestTakeoverAfterLapseCountedStale(t *testing.T) {
	for _, tc := range []struct {
		name           string
		until, expires time.Duration
		want           map[string]int64
	}{
		{"lapsed", 50 * time.Millisecond, 50 * time.Millisecond, map[string]int64{"ran": 1}},
		{"released", 30 * time.Millisecond, time.Hour, map[string]int64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mp, reader := meterReader()
			now := time.Now()
			store := &lapsingStore{until: now.Add(tc.until), expires: now.Add(tc.expires)}
			g := testenv.NewGuard(t, store, &core.Config{DisableHeartbeat: true, MeterProvider: mp})
			res, err := g.Run(context.Background(), core.Job{Key: "k", WaitUntil: time.Now().Add(time.Minute)},
				func(context.Context) ([]byte, error) { return nil, nil })
			require.NoError(t, err)
			require.Equal(t, core.Ran, res.Outcome)
			require.Equal(t, tc.want, counts(t, reader, "jobonce.claims.stale", "outcome"))
		})
	}
}
