package chaos

import (
	"fmt"
	"time"

	"github.com/jobonce/jobonce/internal/stall"
)

// A chaos run's leases are tens of milliseconds, so a loaded machine can
// hold up a heartbeat or a lease check long enough for a lease to lapse
// under a job no code could have stopped in time. The run's stall probe
// (internal/stall) measures when the test process was held up; the judge
// takes a breach of lease timing that the stalls explain as a note rather
// than a defect, and does not count stalled time against a call's time
// bound.

// stallExplains reports whether stalls of the test process explain a
// lateness of overshoot within [from, to]: they cover three quarters of it
// (the probe wakes every millisecond and keeps stalls from stall.Min only, so
// it sees a little less than a stop's whole; a process that is slow, not
// stalled, shows as short stalls that cover much less), and describes
// them, whether they do or not.
func (r *chaosRun) stallExplains(from, to time.Time, overshoot time.Duration) (string, bool) {
	paused := r.stalls.Within(from, to)
	s, n := r.stalls.Longest(from, to)
	why := fmt.Sprintf("the test process was stalled (not scheduled, or its goroutines waiting to run) for %s of the %s from %s to %s, the longest stall %s from %s (lease %s)",
		paused.Round(100*time.Microsecond), to.Sub(from).Round(100*time.Microsecond), r.truth.at(from), r.truth.at(to),
		n.Round(100*time.Microsecond), r.truth.at(s.From), r.lease.Round(time.Millisecond))
	return why, overshoot > 0 && paused >= stall.Min && paused >= overshoot*3/4
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
