package sqsonce

import (
	"time"

	"github.com/jobonce/jobonce/core"
)

// action is what happens to a message after its outcome is known.
type action uint8

const (
	// leave: the message stays as it is; the queue redelivers it when its
	// visibility lapses, and its redrive policy applies.
	leave action = iota
	// remove: the job is done; delete the message.
	remove
	// hide: set the message's visibility to the decision's delay.
	hide
)

// decision is an action and, for hide, the visibility to set.
type decision struct {
	act   action
	delay time.Duration
}

// visibilityMargin is kept free below SQS's 12-hour limit, for the time
// between the receive and the visibility change.
const visibilityMargin = time.Minute

// decide maps a final outcome to what happens to the message: nothing is
// deleted unless its job ran or is done. receives is
// the message's ApproximateReceiveCount, elapsed the time since it was
// received; stopping reports a shutdown whose deadline has passed, so the
// message is handed back to the queue at once.
func (o *options) decide(out core.Outcome, err error, receives int, elapsed time.Duration, stopping bool) decision {
	switch {
	case err == nil && handled(out):
		return decision{act: remove}
	case out == core.Running:
		retry, _ := core.RetryAfter(err)
		return o.hide(max(retry, o.RunningDelay), receives, elapsed)
	case out == core.Unavailable:
		if stopping {
			return decision{act: hide}
		}
		return o.hide(o.UnavailableDelay, receives, elapsed)
	case out == core.Canceled:
		// The caller's context ended before the claim was answered: nothing
		// ran and no claim is held, so this is neither a failure nor an
		// outage. A stopping Poller hands the message back for another
		// consumer at once. Otherwise (a receive loop's own context, which
		// may be a per-message deadline) the message is left as it is: it
		// comes back when the visibility its receive set lapses, at the
		// queue's own pace, rather than being received again at once.
		if stopping {
			return decision{act: hide}
		}
		return decision{act: leave}
	case out == core.Failed:
		if stopping {
			return decision{act: hide}
		}
		if o.FailureDelay > 0 {
			return o.hide(o.FailureDelay, receives, elapsed)
		}
		return decision{act: leave}
	default: // Conflict, Rejected: left for the dead-letter queue.
		return decision{act: leave}
	}
}

// handled reports whether out means the job ran or is done, so its message
// can be deleted. It is decided from the outcome alone, never from a nil
// error: a caller settling a failure it decided itself passes no error.
func handled(out core.Outcome) bool {
	switch out {
	case core.Ran, core.Duplicate, core.LeaseLost, core.Unrecorded, core.Unguarded:
		return true
	}
	return false
}

// hide returns a hide decision for base doubled per earlier receive, capped
// by MaxDelay and by what is left of SQS's 12 hours since the receive.
func (o *options) hide(base time.Duration, receives int, elapsed time.Duration) decision {
	return decision{act: hide, delay: backoff(base, receives, min(o.MaxDelay, maxVisibility-visibilityMargin-elapsed))}
}

// backoff returns base doubled for every receive after the first, capped at
// limit (and never negative), rounded up to whole seconds as SQS takes them.
func backoff(base time.Duration, receives int, limit time.Duration) time.Duration {
	if limit <= 0 {
		return 0
	}
	d := base
	for i := 1; i < receives && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	if r := d % time.Second; r != 0 {
		if up := d - r + time.Second; up <= limit {
			d = up
		} else {
			d -= r
		}
	}
	return d
}

// seconds converts a visibility to SQS's whole seconds.
func seconds(d time.Duration) int32 {
	return int32(d / time.Second)
}
