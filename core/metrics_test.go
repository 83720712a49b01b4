package core_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/jobonce/jobonce/core"
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
