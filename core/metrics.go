package core

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

const instrumentationName = "github.com/jobonce/jobonce/core"

// metrics holds the OpenTelemetry instruments:
//
//	jobonce.outcomes      counter, attribute outcome
//	jobonce.run.duration  histogram in seconds of job functions that ran, attribute outcome
type metrics struct {
	outcomes metric.Int64Counter
	duration metric.Float64Histogram
	add      [len(outcomeNames)][]metric.AddOption
	rec      [len(outcomeNames)][]metric.RecordOption
}

func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter(instrumentationName)
	m := &metrics{}
	var err error
	m.outcomes, err = meter.Int64Counter("jobonce.outcomes",
		metric.WithDescription("Deliveries handled by jobonce, by outcome."))
	if err != nil {
		return nil, err
	}
	m.duration, err = meter.Float64Histogram("jobonce.run.duration", metric.WithUnit("s"),
		metric.WithDescription("How long job functions ran, by outcome."))
	if err != nil {
		return nil, err
	}
	for i, name := range outcomeNames {
		attrs := metric.WithAttributeSet(attribute.NewSet(attribute.String("outcome", name)))
		m.add[i] = []metric.AddOption{attrs}
		m.rec[i] = []metric.RecordOption{attrs}
	}
	return m, nil
}

func (m *metrics) record(ctx context.Context, out Outcome, ran time.Duration) {
	i := int(out)
	if i >= len(m.add) {
		i = 0
	}
	m.outcomes.Add(ctx, 1, m.add[i]...)
	if out.Executed() {
		m.duration.Record(ctx, ran.Seconds(), m.rec[i]...)
	}
}
