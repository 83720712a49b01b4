package bench

import (
	"context"
	"fmt"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/require"

	lambdaonce "github.com/jobonce/jobonce/adapters/lambda"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/core/pgstore"
	"github.com/jobonce/jobonce/internal/pgtest"
	"github.com/jobonce/jobonce/internal/testenv"
)

// BenchmarkHandler measures one invocation with a batch of ten new records
// (each run once: claims in one round trip, markers in one more) against a
// bare handler that runs the same ten records one after the other, on each
// store. Report per op is per batch; ns/record divides by ten.
//
//	go -C bench test -run '^$' -bench Handler -benchtime 2000x
//
// It lives here rather than in adapters/lambda, whose module would otherwise
// require pgstore and pgx for its PostgreSQL case.
func BenchmarkHandler(b *testing.B) {
	const batch = 10
	arn := "arn:aws:sqs:us-east-1:000000000000:bench"
	work := func(context.Context, events.SQSMessage) error { return nil }
	n := 0
	next := func() events.SQSEvent {
		ev := events.SQSEvent{Records: make([]events.SQSMessage, batch)}
		for i := range ev.Records {
			n++
			id := fmt.Sprintf("m-%d", n)
			ev.Records[i] = events.SQSMessage{MessageId: id, ReceiptHandle: "rh-" + id, Body: id,
				EventSourceARN: arn, Attributes: map[string]string{"ApproximateReceiveCount": "1"}}
		}
		return ev
	}
	report := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/record")
	}

	b.Run("bare", func(b *testing.B) {
		for b.Loop() {
			ev := next()
			var resp events.SQSEventResponse
			for _, r := range ev.Records {
				if err := work(context.Background(), r); err != nil {
					resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: r.MessageId})
				}
			}
		}
		report(b)
	})
	guards := []struct {
		name string
		g    func(b *testing.B) *core.Guard
	}{
		{"memstore", func(b *testing.B) *core.Guard { return testenv.NewGuard(b, memstore.New(), nil) }},
		{"redis", func(b *testing.B) *core.Guard { return testenv.RedisGuard(b, nil) }},
		{"postgres", func(b *testing.B) *core.Guard {
			pool, _ := pgtest.Postgres(b)
			s, err := pgstore.New(context.Background(), pool, &pgstore.Config{Migrate: true})
			require.NoError(b, err)
			return testenv.NewGuard(b, s, nil)
		}},
	}
	for _, s := range guards {
		b.Run(s.name, func(b *testing.B) {
			h, err := lambdaonce.Wrap(s.g(b), work, nil)
			require.NoError(b, err)
			for b.Loop() {
				resp, err := h(context.Background(), next())
				if err != nil || len(resp.BatchItemFailures) > 0 {
					b.Fatalf("failures %v, error %v", resp.BatchItemFailures, err)
				}
			}
			report(b)
		})
	}
}
