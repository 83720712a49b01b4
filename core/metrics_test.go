package core_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

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
	require.Equal(t, map[string]int64{"sqs": 2, "asynq": 150}, counts(t, reader, "jobonce.outcomes", "jobonce.source"))
}
