package core_test

import (
	"context"
	"strconv"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// BenchmarkDo measures the Guard's own work per job on the in-process
// store: a claim, the job, a done marker, with the outcome observed.
// "adapter" jobs carry a source and a kind, as the adapters' do; "sdk"
// jobs are adapter jobs measured by OpenTelemetry's SDK, as when metrics
// are exported, rather than by the global no-op provider.
func BenchmarkDo(b *testing.B) {
	for _, name := range []string{"plain", "adapter", "sdk"} {
		b.Run(name, func(b *testing.B) {
			cfg := &core.Config{DisableHeartbeat: true}
			if name == "sdk" {
				cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			}
			g := testenv.NewGuard(b, memstore.New(), cfg)
			ctx := context.Background()
			nop := func(context.Context) ([]byte, error) { return nil, nil }
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				job := core.Job{Key: "job-" + strconv.Itoa(i)}
				if name != "plain" {
					job.Source, job.Kind = "asynq", "email:welcome"
				}
				if _, err := g.Run(ctx, job, nop); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
