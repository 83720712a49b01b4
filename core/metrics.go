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

// Bucket boundaries of the histograms, in seconds. A View of the
// MeterProvider replaces them (see docs/semantics.md).
var (
	// runBuckets spans job functions from a millisecond to four hours.
	runBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
		30, 60, 120, 300, 600, 1800, 3600, 7200, 14400}
	// lagBuckets spans redeliveries from a millisecond to 14 days, twice a
	// week's Retention; half, all and twice the default Retention (12h,
	// 24h, 48h) are edges.
	lagBuckets = []float64{0.001, 0.01, 0.1, 1, 5, 15, 30, 60, 300, 900, 1800, 3600, 7200, 10800,
		21600, 43200, 64800, 86400, 129600, 172800, 259200, 345600, 604800, 1209600}
	// waitBuckets spans waits for a running copy from a millisecond to
	// five minutes.
	waitBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
		30, 60, 300}
)

// metrics holds the OpenTelemetry instruments (docs/semantics.md lists
// them with their attributes). Measurements of an outcome carry the
// attributes outcome, jobonce.source and jobonce.kind (the job's, when
// set) and jobonce.consumer (Config.Consumer, when set); those of the
// claims held and the copies waiting carry all but outcome, and the
// Guard's Lease and Retention only jobonce.consumer.
//
// It also keeps the durations of each Source and Kind's latest runs that
// ended Ran (runs), which decide how long a copy waits for a running one.
type metrics struct {
	outcomes metric.Int64Counter
	duration metric.Float64Histogram
	lag      metric.Float64Histogram
	wait     metric.Float64Histogram
	shadow   metric.Int64Counter
	stale    metric.Int64Counter
	failOpen metric.Int64Counter
	held     metric.Int64UpDownCounter
	waiting  metric.Int64UpDownCounter
	consumer string

	mu    sync.RWMutex
	sets  map[attrKey]*attrOpts
	kinds map[[2]string]struct{} // the Source and Kind pairs seen, up to maxKinds
}

// attrKey names an attribute set; an out of zero names the set of a
// Source and Kind without an outcome.
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

// newMetrics makes the instruments of a Guard of configuration cfg, and
// records its Lease and Retention.
func newMetrics(cfg *Config) (*metrics, error) {
	mp := cfg.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter(instrumentationName)
	m := &metrics{consumer: cfg.Consumer, sets: map[attrKey]*attrOpts{}, kinds: map[[2]string]struct{}{}}
	var err error
	if m.outcomes, err = meter.Int64Counter("jobonce.outcomes", metric.WithUnit("{delivery}"),
		metric.WithDescription("Deliveries handled by jobonce, by outcome.")); err != nil {
		return nil, err
	}
	if m.duration, err = meter.Float64Histogram("jobonce.run.duration", metric.WithUnit("s"),
		metric.WithDescription("How long job functions ran, by outcome."),
		metric.WithExplicitBucketBoundaries(runBuckets...)); err != nil {
		return nil, err
	}
	if m.lag, err = meter.Float64Histogram("jobonce.duplicate.lag", metric.WithUnit("s"),
		metric.WithDescription("How long after its first copy's done marker was written a duplicate arrived; size Retention above the longest."),
		metric.WithExplicitBucketBoundaries(lagBuckets...)); err != nil {
		return nil, err
	}
	if m.wait, err = meter.Float64Histogram("jobonce.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("How long deliveries waited for a running copy of their job, by the outcome they then had."),
		metric.WithExplicitBucketBoundaries(waitBuckets...)); err != nil {
		return nil, err
	}
	if m.shadow, err = meter.Int64Counter("jobonce.shadow.skips", metric.WithUnit("{delivery}"),
		metric.WithDescription("Deliveries that shadow mode ran and enforcement would have skipped, by the outcome enforcement would give.")); err != nil {
		return nil, err
	}
	if m.stale, err = meter.Int64Counter("jobonce.claims.stale", metric.WithUnit("{delivery}"),
		metric.WithDescription("Deliveries that found their job's claim not renewed for two heartbeat periods: its holder crashed, froze or lost the store; by the outcome they then had.")); err != nil {
		return nil, err
	}
	if m.failOpen, err = meter.Int64Counter("jobonce.fail_open", metric.WithUnit("{delivery}"),
		metric.WithDescription("Deliveries that ran unguarded because the store could not be reached (Config.FailOpen), by the outcome they had.")); err != nil {
		return nil, err
	}
	if m.held, err = meter.Int64UpDownCounter("jobonce.claims.held", metric.WithUnit("{claim}"),
		metric.WithDescription("Claims this process holds now: their job runs, or their done marker is being written.")); err != nil {
		return nil, err
	}
	if m.waiting, err = meter.Int64UpDownCounter("jobonce.copies.waiting", metric.WithUnit("{delivery}"),
		metric.WithDescription("Deliveries of this process waiting now for a running copy of their job.")); err != nil {
		return nil, err
	}
	if err := m.recordConfig(meter, cfg); err != nil {
		return nil, err
	}
	return m, nil
}

// recordConfig records the Guard's Lease and Retention as gauges, for
// rules that compare lags and ages with them.
func (m *metrics) recordConfig(meter metric.Meter, cfg *Config) error {
	lease, err := meter.Float64Gauge("jobonce.lease", metric.WithUnit("s"),
		metric.WithDescription("The Guard's Lease: how long a claim lives without a heartbeat."))
	if err != nil {
		return err
	}
	retention, err := meter.Float64Gauge("jobonce.retention", metric.WithUnit("s"),
		metric.WithDescription("The Guard's Retention: how long a done marker is kept."))
	if err != nil {
		return err
	}
	var set attribute.Set
	if m.consumer != "" {
		set = attribute.NewSet(attribute.String("jobonce.consumer", m.consumer))
	}
	ctx := context.Background()
	lease.Record(ctx, cfg.Lease.Seconds(), metric.WithAttributeSet(set))
	retention.Record(ctx, cfg.Retention.Seconds(), metric.WithAttributeSet(set))
	return nil
}

// opts returns the attribute set of an outcome of a job of source and kind,
// or with out zero, the set of source and kind alone. Once maxKinds Source
// and Kind pairs have been seen, a new pair is counted under Source and
// Kind "other" (and, not being cached, costs a lock each time).
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
	if out != 0 {
		attrs = append(attrs, attribute.String("outcome", outcomeNames[out]))
	}
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
	if e.Waited > 0 {
		m.wait.Record(ctx, e.Waited.Seconds(), o.rec...)
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

// recordStale counts a delivery of outcome out that found its job's claim
// stale (see Claim.noteStale).
func (m *metrics) recordStale(ctx context.Context, out Outcome, source, kind string) {
	m.stale.Add(ctx, 1, m.opts(out, source, kind).add...)
}

// recordFailOpen counts a delivery of outcome out that ran unguarded
// because the store could not be reached (Config.FailOpen).
func (m *metrics) recordFailOpen(ctx context.Context, out Outcome, source, kind string) {
	m.failOpen.Add(ctx, 1, m.opts(out, source, kind).add...)
}

// hold counts a claim of a job of source and kind as held, and returns
// the attribute set that unhold takes when it no longer is.
func (m *metrics) hold(ctx context.Context, source, kind string) *attrOpts {
	o := m.opts(0, source, kind)
	m.held.Add(ctx, 1, o.add...)
	return o
}

func (m *metrics) unhold(ctx context.Context, o *attrOpts) {
	m.held.Add(ctx, -1, o.add...)
}

// startWaiting counts a delivery of source and kind as waiting for a
// running copy, and returns the attribute set stopWaiting takes when it
// no longer does.
func (m *metrics) startWaiting(ctx context.Context, source, kind string) *attrOpts {
	o := m.opts(0, source, kind)
	m.waiting.Add(ctx, 1, o.add...)
	return o
}

func (m *metrics) stopWaiting(ctx context.Context, o *attrOpts) {
	m.waiting.Add(ctx, -1, o.add...)
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
