package testenv

import (
	"context"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jobonce/jobonce/core"
)

// MarkerDelays measures, for benchmarks, the crash window of guarded jobs:
// how long after a job's own function returned successfully its done marker
// was written (its outcome Ran observed). A worker that crashes within that
// window leaves no marker, so a later copy runs the job again.
//
// Wrap the job's function with RecordReturns, set Observe as the Guard's
// Config.Observer, and call Report once the jobs are done. The zero value is
// ready to use; it is safe for concurrent use.
type MarkerDelays struct {
	mu       sync.Mutex
	returned map[string]time.Time // by job key: when its function returned
	delays   []time.Duration
}

// RecordReturns wraps fn, a job's function, so that each successful return
// is recorded in d under the job's key, as key names it: the key the Guard
// is given (core.Event.Key, without the Guard's KeyPrefix). The key is
// derived before fn runs, so that its cost does not count in the window.
func RecordReturns[T any](d *MarkerDelays, key func(T) string, fn func(context.Context, T) error) func(context.Context, T) error {
	return func(ctx context.Context, job T) error {
		k := key(job)
		if err := fn(ctx, job); err != nil {
			return err
		}
		d.record(k, time.Now())
		return nil
	}
}

// record records that the function of the job with key k returned at t.
func (d *MarkerDelays) record(k string, t time.Time) {
	d.mu.Lock()
	if d.returned == nil {
		d.returned = make(map[string]time.Time)
	}
	d.returned[k] = t
	d.mu.Unlock()
}

// Observe is a core.Observer: on an outcome Ran, whose done marker is
// written, it records the time since the job's function returned. Other
// outcomes, and keys whose return was not recorded, are ignored.
func (d *MarkerDelays) Observe(_ context.Context, e core.Event) {
	if e.Outcome != core.Ran {
		return
	}
	now := time.Now()
	d.mu.Lock()
	if t, ok := d.returned[e.Key]; ok {
		delete(d.returned, e.Key)
		d.delays = append(d.delays, now.Sub(t))
	}
	d.mu.Unlock()
}

// Report reports the median and 99th percentile of the delays recorded so
// far, in microseconds, as the metrics prefix+"marker-p50-µs" and
// prefix+"marker-p99-µs". It fails the benchmark when none was recorded,
// which means the keys RecordReturns derives are not the Guard's.
func (d *MarkerDelays) Report(b *testing.B, prefix string) {
	b.Helper()
	d.mu.Lock()
	delays := slices.Clone(d.delays)
	d.mu.Unlock()
	if len(delays) == 0 {
		b.Error("testenv: MarkerDelays recorded no delay: no Ran outcome matched a recorded return")
		return
	}
	slices.Sort(delays)
	b.ReportMetric(quantileMicros(delays, 0.50), prefix+"marker-p50-µs")
	b.ReportMetric(quantileMicros(delays, 0.99), prefix+"marker-p99-µs")
}

// quantileMicros returns the q-quantile (nearest rank) of sorted, in
// microseconds.
func quantileMicros(sorted []time.Duration, q float64) float64 {
	i := max(int(math.Ceil(q*float64(len(sorted))))-1, 0)
	return float64(sorted[i]) / float64(time.Microsecond)
}
