package storetest

import (
	"fmt"
	"sync"
	"time"
)

// A chaos run's leases are tens of milliseconds, so a loaded machine that
// leaves the test process unscheduled for a while can let a lease lapse
// under a job no code could have stopped in time: its cancellation timer
// fires late, or it starts late after its lease check. The stall probe
// measures such pauses, and the judge takes a breach of lease timing that
// the pauses explain as a note rather than a defect, and does not count
// paused time against a call's time bound. At normal load the pauses are
// rare and short, so the checks keep their edge.

// stallTick is how often the probe wakes.
const stallTick = time.Millisecond

// stallMin is the shortest pause the probe keeps.
const stallMin = 2 * time.Millisecond

// stallProbe records the spans during which a goroutine that asked to
// wake every stallTick did not.
type stallProbe struct {
	mu    sync.Mutex
	spans []span
}

// start measures pauses from now until stop is closed, in a goroutine it
// returns the end of. The first wake is due from now, not from when the
// goroutine first runs, so a pause before then is measured too.
func (p *stallProbe) start(stop <-chan struct{}) (done <-chan struct{}) {
	t := time.NewTimer(stallTick)
	due := time.Now().Add(stallTick)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C: // its value may be the time the timer was due
				now := time.Now()
				if late := now.Sub(due); late >= stallMin {
					p.mu.Lock()
					p.spans = append(p.spans, span{from: due, to: now})
					p.mu.Unlock()
				}
				due = time.Now().Add(stallTick)
				t.Reset(stallTick)
			}
		}
	}()
	return ended
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

// stallExplains reports whether the pauses of the test process explain a
// lateness of overshoot within [from, to]: they cover three quarters of it
// (the probe wakes every stallTick and keeps pauses from stallMin only, so
// it sees a little less than a stop's whole; a process that is slow, not
// stopped, shows as short pauses that cover much less), and describes
// them, whether they do or not.
func (r *chaosRun) stallExplains(from, to time.Time, overshoot time.Duration) (string, bool) {
	paused := r.stalls.within(from, to)
	s, n := r.stalls.longest(from, to)
	why := fmt.Sprintf("the test process was paused for %s of the %s from %s to %s, the longest pause %s from %s (lease %s)",
		paused.Round(100*time.Microsecond), to.Sub(from).Round(100*time.Microsecond), r.truth.at(from), r.truth.at(to),
		n.Round(100*time.Microsecond), r.truth.at(s.from), r.lease.Round(time.Millisecond))
	return why, overshoot > 0 && paused >= stallMin && paused >= overshoot*3/4
}

// stallExplainsLapse reports whether pauses of the test process explain
// a claim last renewed (sent) at renewed that was still held by its job,
// unrenewed and uncancelled, at at. The heartbeat's next beat is due a
// third of a lease after the renewal; once a beat is in flight (renewing
// is true), its expiry ends the job by the lease less its margin. A
// timer that fired late by the time from then to at explains it, when
// pauses cover most of that time.
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
