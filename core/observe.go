package core

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// observe reports one outcome to the observer, the logger and the metrics.
// hint is the job's KeyHint when its key is an adapter's default
// (Job.DefaultKey), else nil: the first Duplicate of each kind under such a
// key (in shadow mode, the first job enforcement would skip as one) is
// logged at Info, saying how to key work that repeats on purpose.
func (o *observer) observe(ctx context.Context, e Event, hint *KeyHint) {
	o.record(ctx, &e)
	if o.observer != nil {
		o.observer(ctx, e)
	}
	level, msg := logLevel(&e), ""
	shadowSkip := e.WouldSkip == Duplicate
	if hint != nil && (e.Outcome == Duplicate || shadowSkip) && o.skipped.first(e.Source, e.Kind) {
		level, msg = slog.LevelInfo, firstSkipMessage(hint, shadowSkip)
	}
	if !o.logger.Enabled(ctx, level) {
		return
	}
	if msg == "" {
		msg = logMessage(&e)
	}
	attrs := make([]slog.Attr, 0, 8)
	attrs = append(attrs, slog.String("key", e.Key), slog.String("outcome", e.Outcome.String()))
	if e.Source != "" || e.Kind != "" {
		attrs = append(attrs, slog.String("source", e.Source), slog.String("kind", e.Kind))
	}
	if o.consumer != "" {
		attrs = append(attrs, slog.String("consumer", o.consumer))
	}
	if e.WouldSkip != 0 {
		attrs = append(attrs, slog.String("would_skip", e.WouldSkip.String()))
	}
	if e.Duration > 0 {
		attrs = append(attrs, slog.Duration("ran", e.Duration))
	}
	if e.Lag > 0 {
		attrs = append(attrs, slog.Duration("lag", e.Lag))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("error", e.Err.Error()))
	}
	o.logger.LogAttrs(ctx, level, msg, attrs...)
}

// logLevel returns the level of e's log record: Warn for the outcomes an
// operator must see, Debug for the rest (observe raises a kind's first skip
// under a default key to Info).
func logLevel(e *Event) slog.Level {
	switch e.Outcome {
	case LeaseLost, Unrecorded, Conflict, Unavailable, Rejected:
		return slog.LevelWarn
	case Ran:
		if e.Err != nil { // the result was not stored
			return slog.LevelWarn
		}
	case Unguarded:
		if e.Err != nil && e.WouldSkip == 0 {
			return slog.LevelWarn
		}
	}
	return slog.LevelDebug
}

// logMessage returns the message of e's log record.
func logMessage(e *Event) string {
	switch {
	case e.Outcome == LeaseLost:
		return "jobonce: job ran but its lease was lost before it was recorded; another copy may run it again"
	case e.Outcome == Unrecorded:
		return "jobonce: job ran but the store could not record it; a later copy may run it again"
	case e.Outcome == Unguarded && e.WouldSkip != 0:
		return "jobonce: shadow mode ran a job that enforcement would skip as " + e.WouldSkip.String()
	case e.Outcome == Ran && e.Err != nil:
		return "jobonce: job ran and was recorded without its result, too large to store; duplicates get no result"
	case e.Outcome == Unguarded && e.Err != nil:
		return "jobonce: store unavailable; job ran unguarded (FailOpen)"
	}
	return "jobonce: " + e.Outcome.String()
}

// event returns the Event of an outcome of job.
func (job *Job) event(out Outcome, err error) Event {
	return Event{Key: job.Key, Kind: job.Kind, Source: job.Source, Outcome: out, Err: err}
}

// skipHint returns the job's KeyHint when its key is an adapter's default
// (DefaultKey), else nil.
func (job *Job) skipHint() *KeyHint {
	if !job.DefaultKey {
		return nil
	}
	return &job.KeyHint
}

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

// observer reports each outcome to Config.Observer, the log (see
// observe) and the OpenTelemetry instruments (docs/semantics.md lists them
// with their attributes). Measurements of an outcome carry the
// attributes outcome, jobonce.source and jobonce.kind (the job's, when
// set) and jobonce.consumer (Config.Consumer, when set); those of the
// claims held and the copies waiting carry all but outcome, and the
// Guard's Lease and Retention only jobonce.consumer.
//
// It also keeps the durations of each Source and Kind's latest runs that
// ended Ran (runs), which decide how long a copy waits for a running one.
type observer struct {
	observer func(context.Context, Event) // Config.Observer
	logger   *slog.Logger
	skipped  *firstSkips // the kinds skipped under a default key so far

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

// newObserver makes the observer of a Guard of configuration cfg, with its
// instruments, and records its Lease and Retention.
func newObserver(cfg *Config) (*observer, error) {
	mp := cfg.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter(instrumentationName)
	o := &observer{observer: cfg.Observer, logger: cfg.Logger, skipped: newFirstSkips(),
		consumer: cfg.Consumer, sets: map[attrKey]*attrOpts{}, kinds: map[[2]string]struct{}{}}
	var err error
	if o.outcomes, err = meter.Int64Counter("jobonce.outcomes", metric.WithUnit("{delivery}"),
		metric.WithDescription("Deliveries handled by jobonce, by outcome.")); err != nil {
		return nil, err
	}
	if o.duration, err = meter.Float64Histogram("jobonce.run.duration", metric.WithUnit("s"),
		metric.WithDescription("How long job functions ran, by outcome."),
		metric.WithExplicitBucketBoundaries(runBuckets...)); err != nil {
		return nil, err
	}
	if o.lag, err = meter.Float64Histogram("jobonce.duplicate.lag", metric.WithUnit("s"),
		metric.WithDescription("How long after its first copy's done marker was written a duplicate arrived; size Retention above the longest."),
		metric.WithExplicitBucketBoundaries(lagBuckets...)); err != nil {
		return nil, err
	}
	if o.wait, err = meter.Float64Histogram("jobonce.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("How long deliveries waited for a running copy of their job, by the outcome they then had."),
		metric.WithExplicitBucketBoundaries(waitBuckets...)); err != nil {
		return nil, err
	}
	if o.shadow, err = meter.Int64Counter("jobonce.shadow.skips", metric.WithUnit("{delivery}"),
		metric.WithDescription("Deliveries that shadow mode ran and enforcement would have skipped, by the outcome enforcement would give.")); err != nil {
		return nil, err
	}
	if o.stale, err = meter.Int64Counter("jobonce.claims.stale", metric.WithUnit("{delivery}"),
		metric.WithDescription("Deliveries that found their job's claim not renewed for two heartbeat periods: its holder crashed, froze or lost the store; by the outcome they then had.")); err != nil {
		return nil, err
	}
	if o.failOpen, err = meter.Int64Counter("jobonce.fail_open", metric.WithUnit("{delivery}"),
		metric.WithDescription("Deliveries that ran unguarded because the store could not be reached (Config.FailOpen), by the outcome they had.")); err != nil {
		return nil, err
	}
	if o.held, err = meter.Int64UpDownCounter("jobonce.claims.held", metric.WithUnit("{claim}"),
		metric.WithDescription("Claims this process holds now: their job runs, or their done marker is being written.")); err != nil {
		return nil, err
	}
	if o.waiting, err = meter.Int64UpDownCounter("jobonce.copies.waiting", metric.WithUnit("{delivery}"),
		metric.WithDescription("Deliveries of this process waiting now for a running copy of their job.")); err != nil {
		return nil, err
	}
	if err := o.recordConfig(meter, cfg); err != nil {
		return nil, err
	}
	return o, nil
}

// recordConfig records the Guard's Lease and Retention as gauges, for
// rules that compare lags and ages with them.
func (o *observer) recordConfig(meter metric.Meter, cfg *Config) error {
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
	if o.consumer != "" {
		set = attribute.NewSet(attribute.String("jobonce.consumer", o.consumer))
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
func (o *observer) opts(out Outcome, source, kind string) *attrOpts {
	if int(out) >= len(outcomeNames) {
		out = 0
	}
	k := attrKey{out, source, kind}
	o.mu.RLock()
	set := o.sets[k]
	o.mu.RUnlock()
	if set != nil {
		return set
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	pair := [2]string{source, kind}
	if _, seen := o.kinds[pair]; !seen {
		if len(o.kinds) >= maxKinds {
			k.source, k.kind = "other", "other"
		} else {
			o.kinds[pair] = struct{}{}
		}
	}
	if set = o.sets[k]; set != nil {
		return set
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
	if o.consumer != "" {
		attrs = append(attrs, attribute.String("jobonce.consumer", o.consumer))
	}
	opt := metric.WithAttributeSet(attribute.NewSet(attrs...))
	set = &attrOpts{add: []metric.AddOption{opt}, rec: []metric.RecordOption{opt}}
	if out == Ran {
		set.runs = new(runTimes)
	}
	o.sets[k] = set
	return set
}

func (o *observer) record(ctx context.Context, e *Event) {
	set := o.opts(e.Outcome, e.Source, e.Kind)
	o.outcomes.Add(ctx, 1, set.add...)
	if e.Outcome.executed() {
		o.duration.Record(ctx, e.Duration.Seconds(), set.rec...)
	}
	if e.Outcome == Ran {
		set.runs.add(e.Duration)
	}
	if e.Waited > 0 {
		o.wait.Record(ctx, e.Waited.Seconds(), set.rec...)
	}
	if e.WouldSkip != 0 {
		o.shadow.Add(ctx, 1, o.opts(e.WouldSkip, e.Source, e.Kind).add...)
	}
	if e.Lag > 0 {
		lagOut := e.Outcome
		if e.WouldSkip == Duplicate {
			lagOut = Duplicate
		}
		o.lag.Record(ctx, e.Lag.Seconds(), o.opts(lagOut, e.Source, e.Kind).rec...)
	}
}

// recordStale counts a delivery of outcome out that found its job's claim
// stale (see Claim.noteRunning).
func (o *observer) recordStale(ctx context.Context, out Outcome, source, kind string) {
	o.stale.Add(ctx, 1, o.opts(out, source, kind).add...)
}

// recordFailOpen counts a delivery of outcome out that ran unguarded
// because the store could not be reached (Config.FailOpen).
func (o *observer) recordFailOpen(ctx context.Context, out Outcome, source, kind string) {
	o.failOpen.Add(ctx, 1, o.opts(out, source, kind).add...)
}

// hold counts a claim of a job of source and kind as held, and returns
// the attribute set that unhold takes when it no longer is.
func (o *observer) hold(ctx context.Context, source, kind string) *attrOpts {
	set := o.opts(0, source, kind)
	o.held.Add(ctx, 1, set.add...)
	return set
}

func (o *observer) unhold(ctx context.Context, set *attrOpts) {
	o.held.Add(ctx, -1, set.add...)
}

// startWaiting counts a delivery of source and kind as waiting for a
// running copy, and returns the attribute set stopWaiting takes when it
// no longer does.
func (o *observer) startWaiting(ctx context.Context, source, kind string) *attrOpts {
	set := o.opts(0, source, kind)
	o.waiting.Add(ctx, 1, set.add...)
	return set
}

func (o *observer) stopWaiting(ctx context.Context, set *attrOpts) {
	o.waiting.Add(ctx, -1, set.add...)
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
func (o *observer) runsOf(source, kind string) *runTimes {
	return o.opts(Ran, source, kind).runs
}

// expectedEnd returns when the running claim whose fence is fence is
// expected to end: its start (the fence, by the store's clock, or now
// when it is later or unknown) plus the 90th percentile of the latest runs
// of job's Source and Kind in this Guard. known is false before the Guard
// has seen minRunSamples of them.
func (o *observer) expectedEnd(job Job, fence int64) (end time.Time, known bool) {
	p90, known := o.runsOf(job.Source, job.Kind).p90()
	if !known {
		return time.Time{}, false
	}
	start := time.Now()
	if fence > 0 {
		if s := time.UnixMicro(fence); s.Before(start) {
			start = s
		}
	}
	return start.Add(p90), true
}

// runSamples is how many of a kind's latest runs a Guard keeps the
// durations of, and minRunSamples how many it needs before it expects
// anything of the kind's runs.
const (
	runSamples    = 32
	minRunSamples = 5
)

// runTimes keeps the durations of a kind's latest runs that ended Ran, in a
// ring written without a lock, for the 90th percentile a copy that finds
// its job running is measured against (see Claim.waitUntil).
type runTimes struct {
	next atomic.Uint64
	d    [runSamples]atomic.Int64
}

func (r *runTimes) add(d time.Duration) {
	i := r.next.Add(1) - 1
	r.d[i%runSamples].Store(int64(d))
}

// p90 returns the 90th percentile of the durations kept, and false when
// fewer than minRunSamples runs were seen.
func (r *runTimes) p90() (time.Duration, bool) {
	n := min(r.next.Load(), runSamples)
	if n < minRunSamples {
		return 0, false
	}
	var ds [runSamples]int64
	for i := range n {
		ds[i] = r.d[i].Load()
	}
	s := ds[:n]
	slices.Sort(s)
	return time.Duration(s[(n*9+9)/10-1]), true
}
