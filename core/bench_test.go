package core_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// BenchmarkDo measures the Guard's own work per job on the in-process
// store: a claim, the job, a done marker, with the outcome observed.
// "adapter" jobs carry a source and a kind, as the adapters' do.
func BenchmarkDo(b *testing.B) {
	for _, name := range []string{"plain", "adapter"} {
		b.Run(name, func(b *testing.B) {
			g := testenv.NewGuard(b, memstore.New(), &core.Config{DisableHeartbeat: true})
			ctx := context.Background()
			nop := func(context.Context) ([]byte, error) { return nil, nil }
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				job := core.Job{Key: "job-" + strconv.Itoa(i)}
				if name == "adapter" {
					job.Source, job.Kind = "asynq", "email:welcome"
				}
				if _, err := g.Run(ctx, job, nop); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
