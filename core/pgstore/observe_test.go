package pgstore_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/jobonce/jobonce/core"
)

// TestTxModeIsObserved: the transactional mode's outcomes reach the Guard's
// Observer, log and metrics exactly as leased claims' do: one event, one log
// record and one count per delivery, with the job's run time.
func TestTxModeIsObserved(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, pool := newStore(t, nil)
	effects(t, pool)

	var mu sync.Mutex
	var events []core.Event
	var logs bytes.Buffer
	reader := sdkmetric.NewManualReader()
	g, err := core.New(s, &core.Config{
		Observer: func(_ context.Context, e core.Event) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, e)
		},
		Logger:        slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
	})
	require.NoError(t, err)
	tg, err := core.NewTxGuard[pgx.Tx](g)
	require.NoError(t, err)

	failing := errors.New("effect failed")
	for _, step := range []struct {
		key  string
		fn   func(context.Context, pgx.Tx) error
		want core.Outcome
	}{
		{"a", insertEffect("a"), core.Ran},
		{"a", insertEffect("a"), core.Duplicate},
		{"b", func(context.Context, pgx.Tx) error { return failing }, core.Failed},
		{"", insertEffect(""), core.Rejected},
	} {
		out, _ := tg.Do(ctx, step.key, step.fn)
		require.Equal(t, step.want, out, "key %q", step.key)
	}
	// A leased claim on the same Guard lands in the same counters.
	out, err := g.Do(ctx, "a", func(context.Context) error { return errors.New("must not run") })
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, out)

	mu.Lock()
	var seen []core.Outcome
	for _, e := range events {
		seen = append(seen, e.Outcome)
	}
	mu.Unlock()
	require.Equal(t, []core.Outcome{core.Ran, core.Duplicate, core.Failed, core.Rejected, core.Duplicate}, seen)
	require.ErrorIs(t, events[2].Err, failing)
	require.Positive(t, events[0].Duration, "the run time of the transactional job")

	for _, want := range []string{"outcome=ran", "outcome=duplicate", "outcome=failed", "outcome=rejected"} {
		require.Contains(t, logs.String(), want)
	}

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	counts := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "jobonce.outcomes" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				v, _ := dp.Attributes.Value("outcome")
				counts[v.AsString()] += dp.Value
			}
		}
	}
	require.Equal(t, map[string]int64{"ran": 1, "duplicate": 2, "failed": 1, "rejected": 1}, counts)
}
