package core

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

const instrumentationName = "github.com/jobonce/jobonce/core"

// maxKinds bounds the distinct Source and Kind pairs a Guard's metrics
// carry; further pairs are counted under Source and Kind "other".
const maxKinds = 100

// metrics holds the OpenTelemetry instruments. Every measurement carries
// the attributes outcome, jobonce.source and jobonce.kind (the job's, when
// set) and jobonce.consumer (Config.Consumer, when set):
//
//	jobonce.outcomes          counter of deliveries, by outcome
//	jobonce.run.duration      histogram (s) of job functions that ran
//	jobonce.duplicate.lag     histogram (s): how long after the first copy's done marker a duplicate arrived
//	jobonce.shadow.skips      counter of deliveries shadow mode ran that enforcement would skip, by that outcome
//
// It also keeps the durations of each Source and Kind's latest runs that
// ended Ran (runs), which decide how long a copy waits for a running one.
type metrics struct {
	outcomes metric.Int64Counter
	duration metric.Float64Histogram
	lag      metric.Float64Histogram
	shadow   metric.Int64Counter
	consumer string

	mu    sync.RWMutex
	sets  map[attrKey]*attrOpts
	kinds map[[2]string]struct{} // the Source and Kind pairs seen, up to maxKinds
}

type attrKey struct {
	out          Outcome
	source, kind string
}

// attrOpts are one attribute set as the instruments take it.
type attrOpts struct {
	add []metric.AddOption
	rec []metric.RecordOption
	// runs keeps the durations of the latest runs of the set's Source and
	// Kind, in the set of outcome Ran.
	runs *runTimes
}

func newMetrics(mp metric.MeterProvider, consumer string) (*metrics, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter(instrumentationName)
	m := &metrics{consumer: consumer, sets: map[attrKey]*attrOpts{}, kinds: map[[2]string]struct{}{}}
	var err error
	if m.outcomes, err = meter.Int64Counter("jobonce.outcomes",
		metric.WithDescription("Deliveries handled by jobonce, by outcome.")); err != nil {
		return nil, err
	}
	if m.duration, err = meter.Float64Histogram("jobonce.run.duration", metric.WithUnit("s"),
		metric.WithDescription("How long job functions ran, by outcome.")); err != nil {
		return nil, err
	}
	if m.lag, err = meter.Float64Histogram("jobonce.duplicate.lag", metric.WithUnit("s"),
		metric.WithDescription("How long after its first copy's done marker was written a duplicate arrived; size Retention above the longest.")); err != nil {
		return nil, err
	}
	if m.shadow, err = meter.Int64Counter("jobonce.shadow.skips",
		metric.WithDescription("Deliveries that shadow mode ran and enforcement would have skipped, by the outcome enforcement would give.")); err != nil {
		return nil, err
	}
	return m, nil
}

// opts returns the attribute set of an outcome of a job of source and kind.
// Once maxKinds Source and Kind pairs have been seen, a new pair is counted
// under Source and Kind "other" (and, not being cached, costs a lock each
// time).
func (m *metrics) opts(out Outcome, source, kind string) *attrOpts {
	if int(out) >= len(outcomeNames) {
		out = 0
	}
	k := attrKey{out, source, kind}
	m.mu.RLock()
	o := m.sets[k]
	m.mu.RUnlock()
	if o != nil {
		return o
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	pair := [2]string{source, kind}
	if _, seen := m.kinds[pair]; !seen {
		if len(m.kinds) >= maxKinds {
			k.source, k.kind = "other", "other"
		} else {
			m.kinds[pair] = struct{}{}
		}
	}
	if o = m.sets[k]; o != nil {
		return o
	}
	attrs := make([]attribute.KeyValue, 0, 4)
	attrs = append(attrs, attribute.String("outcome", outcomeNames[out]))
	if k.source != "" {
		attrs = append(attrs, attribute.String("jobonce.source", k.source))
	}
	if k.kind != "" {
		attrs = append(attrs, attribute.String("jobonce.kind", k.kind))
	}
	if m.consumer != "" {
		attrs = append(attrs, attribute.String("jobonce.consumer", m.consumer))
	}
	set := metric.WithAttributeSet(attribute.NewSet(attrs...))
	o = &attrOpts{add: []metric.AddOption{set}, rec: []metric.RecordOption{set}}
	if out == Ran {
		o.runs = new(runTimes)
	}
	m.sets[k] = o
	return o
}

func (m *metrics) record(ctx context.Context, e *Event) {
	o := m.opts(e.Outcome, e.Source, e.Kind)
	m.outcomes.Add(ctx, 1, o.add...)
	if e.Outcome.Executed() {
		m.duration.Record(ctx, e.Duration.Seconds(), o.rec...)
	}
	if e.Outcome == Ran {
		o.runs.add(e.Duration)
	}
	if e.WouldSkip != 0 {
		m.shadow.Add(ctx, 1, m.opts(e.WouldSkip, e.Source, e.Kind).add...)
	}
	if e.Lag > 0 {
		lagOut := e.Outcome
		if e.WouldSkip == Duplicate {
			lagOut = Duplicate
		}
		m.lag.Record(ctx, e.Lag.Seconds(), m.opts(lagOut, e.Source, e.Kind).rec...)
	}
}

// lagOf returns how long ago a done marker with remaining retention was
// written, under retention; zero when the store did not say.
func lagOf(remaining, retention time.Duration) time.Duration {
	if remaining <= 0 || remaining > retention {
		return 0
	}
	return retention - remaining
}

// runsOf returns the durations kept of the latest runs of source and
// kind (those of "other" beyond maxKinds pairs).
func (m *metrics) runsOf(source, kind string) *runTimes {
	return m.opts(Ran, source, kind).runs
}
