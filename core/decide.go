package core

import (
	"fmt"
	"time"

	"github.com/jobonce/jobonce/core/driver"
)

// decide turns a store's reply to a claim, or to a transactional record,
// into an outcome: 0 when the key is now this caller's (claimed, or
// recorded in its transaction), else the final outcome (Duplicate, Running,
// Conflict, Unavailable) and its error. fp is the caller's fingerprint as
// stored. It is the one place these outcomes are decided.
func (g *Guard) decide(job Job, fp string, reply driver.ClaimReply) (Outcome, error) {
	switch reply.State {
	case driver.StateClaimed:
		return 0, nil
	case driver.StateDone, driver.StateRunning:
		if fp != "" && reply.Fingerprint != "" && fp != reply.Fingerprint {
			return Conflict, fmt.Errorf("%w: key %q is %s with fingerprint %q, this delivery has %q",
				ErrConflict, job.Key, reply.State, reply.Fingerprint, fp)
		}
		if reply.State == driver.StateDone {
			return Duplicate, nil
		}
		return Running, &RunningError{RetryAfter: g.retryAfter(job, reply)}
	default:
		return Unavailable, fmt.Errorf("%w: store replied with unknown state %d", ErrStoreUnavailable, reply.State)
	}
}

// retryAfter is the retry hint of a copy that found its job running: until
// the running copy is expected to end (see expectedEnd), or, once that has
// passed, as long again as the copy is overdue, so that a job running past
// its kind's usual time is asked after at growing intervals; else the
// running claim's remaining lease; within [MinRetryAfter, MaxRetryAfter].
func (g *Guard) retryAfter(job Job, reply driver.ClaimReply) time.Duration {
	d := reply.Remaining
	if end, known := g.expectedEnd(job, reply.Fence); known {
		left := time.Until(end)
		d = min(d, max(left, -left))
	}
	return min(max(d, g.cfg.MinRetryAfter), g.cfg.MaxRetryAfter)
}
