package storetest

import (
	"fmt"
	"runtime/metrics"
	"sync"
	"time"
)

// A chaos run's leases are tens of milliseconds, so a loaded machine can
// hold up a heartbeat or a lease check long enough for a lease to lapse
// under a job no code could have stopped in time: the test process is not
// scheduled at all (its threads wait for a CPU), or its goroutines wait in
// the Go scheduler's run queues for a turn. The stall probe measures both:
// the lateness of a timer of its own, which stops with the process, and the
// time goroutines spent runnable before they ran, which the runtime
// reports (runtime/metrics /sched/latencies, sampled). The judge takes a
// breach of lease timing that the stalls explain as a note rather than a
// defect, and does not count stalled time against a call's time bound. At
// normal load stalls are rare and short, so the checks keep their edge.

// stallTick is how often the probe wakes.
const stallTick = time.Millisecond

// stallMin is the shortest pause the probe keeps.
const stallMin = 2 * time.Millisecond

// stallProbe records the spans during which a goroutine that asked to
// wake every stallTick did not, and those during which a goroutine the
// runtime sampled waited runnable for at least stallMin.
type stallProbe struct {
	mu    sync.Mutex
	spans []span
}

// start measures stalls from now until stop is closed, in a goroutine it
// returns the end of. The first wake is due from now, not from when the
// goroutine first runs, so a stall before then is measured too.
func (p *stallProbe) start(stop <-chan struct{}) (done <-chan struct{}) {
	t := time.NewTimer(stallTick)
	due := time.Now().Add(stallTick)
	waits := newSchedWaits()
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-stop:
				return
			case <-t.C: // its value may be the time the timer was due
				now := time.Now()
				if late := now.Sub(due); late >= stallMin {
					p.add(span{from: due, to: now})
				}
				// A goroutine that began to run since the last read, after
				// waiting at least w, waited through [now-w, last] at least.
				if w := waits.longestSince(); w >= stallMin && now.Add(-w).Before(last) {
					p.add(span{from: now.Add(-w), to: last})
				}
				last = now
				due = time.Now().Add(stallTick)
				t.Reset(stallTick)
			}
		}
	}()
	return ended
}

func (p *stallProbe) add(s span) {
	p.mu.Lock()
	p.spans = append(p.spans, s)
	p.mu.Unlock()
}

// schedWaits reads the runtime's histogram of the time goroutines spent
// runnable before running.
type schedWaits struct {
	sample []metrics.Sample
	counts []uint64 // the bucket counts at the last read
}

func newSchedWaits() *schedWaits {
	w := &schedWaits{sample: []metrics.Sample{{Name: "/sched/latencies:seconds"}}}
	w.longestSince()
	return w
}

// longestSince returns the lower bound of the longest wait counted since
// the last call: zero when none was, or the runtime does not report waits.
func (w *schedWaits) longestSince() time.Duration {
	metrics.Read(w.sample)
	if w.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0
	}
	h := w.sample[0].Value.Float64Histogram()
	var longest time.Duration
	for i, n := range h.Counts {
		if i < len(w.counts) && n > w.counts[i] && h.Buckets[i] > 0 {
			longest = max(longest, time.Duration(h.Buckets[i]*float64(time.Second)))
		}
	}
	w.counts = append(w.counts[:0], h.Counts...)
	return longest
}

// longest returns the longest pause that overlaps [from, to], and its
// length (zero when none does).
func (p *stallProbe) longest(from, to time.Time) (span, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var best span
	var n time.Duration
	for _, s := range p.spans {
		if s.to.Before(from) || s.from.After(to) {
			continue
		}
		if d := s.to.Sub(s.from); d > n {
			best, n = s, d
		}
	}
	return best, n
}

// within returns how much of [from, to] the pauses cover.
func (p *stallProbe) within(from, to time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return within(p.spans, from, to)
}

// stallExplains reports whether stalls of the test process explain a
// lateness of overshoot within [from, to]: they cover three quarters of it
// (the probe wakes every stallTick and keeps stalls from stallMin only, so
// it sees a little less than a stop's whole; a process that is slow, not
// stalled, shows as short stalls that cover much less), and describes
// them, whether they do or not.
func (r *chaosRun) stallExplains(from, to time.Time, overshoot time.Duration) (string, bool) {
	paused := r.stalls.within(from, to)
	s, n := r.stalls.longest(from, to)
	why := fmt.Sprintf("the test process was stalled (not scheduled, or its goroutines waiting to run) for %s of the %s from %s to %s, the longest stall %s from %s (lease %s)",
		paused.Round(100*time.Microsecond), to.Sub(from).Round(100*time.Microsecond), r.truth.at(from), r.truth.at(to),
		n.Round(100*time.Microsecond), r.truth.at(s.from), r.lease.Round(time.Millisecond))
	return why, overshoot > 0 && paused >= stallMin && paused >= overshoot*3/4
}

// stallExplainsLapse reports whether stalls of the test process explain
// a claim last renewed (sent) at renewed that was still held by its job,
// unrenewed and uncancelled, at at. The heartbeat's next beat is due a
// third of a lease after the renewal; once a beat is in flight (renewing
// is true), its expiry ends the job by the lease less its margin. A
// timer that fired late by the time from then to at explains it, when
// stalls cover most of that time.
func (r *chaosRun) stallExplainsLapse(renewed, at time.Time, renewing bool) (string, bool) {
	due := renewed.Add(r.lease / 3)
	if renewing {
		due = renewed.Add(r.lease - heartbeatMargin(r.lease))
	}
	return r.stallExplains(due, at, at.Sub(due))
}

// heartbeatMargin is the core heartbeat's margin before a lease runs out
// (core's safeMargin, which this package cannot call: keep them in step).
func heartbeatMargin(lease time.Duration) time.Duration {
	return min(lease/100+2*time.Millisecond, lease/10)
}
