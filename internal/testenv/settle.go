package testenv

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jobonce/jobonce/core"
)

// Settles measures, for benchmarks, how soon a duplicate settles: from the
// outcome of the copy that ran a job (Ran) to the outcome of its other copy
// (Duplicate), by the job's key, through the Guard's Observer. A copy that
// went back to its framework (Running) and came again settles when it
// finally is a Duplicate, so the framework's retry delay counts in full.
//
// Set Observe as the Guard's Config.Observer (Observer, to watch as well),
// wait for Done(n), and call Report. The zero value is ready to use; it is
// safe for concurrent use.
type Settles struct {
	// Also, when set, sees every event too.
	Also core.Observer

	mu      sync.Mutex
	ran     map[string]time.Time
	dup     map[string]time.Time
	running int
	waited  []time.Duration
	changed chan struct{}
}

// Observe is a core.Observer.
func (s *Settles) Observe(ctx context.Context, e core.Event) {
	now := time.Now()
	if s.Also != nil {
		s.Also(ctx, e)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ran == nil {
		s.ran, s.dup = make(map[string]time.Time), make(map[string]time.Time)
	}
	switch e.Outcome {
	case core.Ran:
		s.ran[e.Key] = now
	case core.Duplicate:
		s.dup[e.Key] = now
		if e.Waited > 0 {
			s.waited = append(s.waited, e.Waited)
		}
	case core.Running:
		s.running++
	}
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
}

// Wait waits until n jobs ran and n duplicates settled, or within ends; it
// fails b then.
func (s *Settles) Wait(b *testing.B, n int, within time.Duration) {
	b.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		if len(s.ran) >= n && len(s.dup) >= n {
			s.mu.Unlock()
			return
		}
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		changed := s.changed
		ran, dup := len(s.ran), len(s.dup)
		s.mu.Unlock()
		select {
		case <-changed:
		case <-deadline.C:
			b.Fatalf("testenv: Settles: %d jobs ran and %d duplicates settled within %s, %d of each wanted", ran, dup, within, n)
		}
	}
}

// Report reports the median and 99th percentile of the settle times, in
// milliseconds (settle-p50-ms, settle-p99-ms), how many copies went back to
// their framework (running/op), and the median wait of the copies that
// waited (waited-p50-ms).
func (s *Settles) Report(b *testing.B) {
	b.Helper()
	s.mu.Lock()
	var settles []time.Duration
	for k, ran := range s.ran {
		if dup, ok := s.dup[k]; ok {
			settles = append(settles, max(0, dup.Sub(ran)))
		}
	}
	waited := slices.Clone(s.waited)
	running := s.running
	s.mu.Unlock()
	if len(settles) == 0 {
		b.Error("testenv: Settles saw no job run and settle as a duplicate")
		return
	}
	slices.Sort(settles)
	b.ReportMetric(quantileMicros(settles, 0.50)/1000, "settle-p50-ms")
	b.ReportMetric(quantileMicros(settles, 0.99)/1000, "settle-p99-ms")
	b.ReportMetric(float64(running)/float64(len(settles)), "running/op")
	if len(waited) > 0 {
		slices.Sort(waited)
		b.ReportMetric(quantileMicros(waited, 0.50)/1000, "waited-p50-ms")
	}
}
