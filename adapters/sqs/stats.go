package sqsonce

import (
	"sync/atomic"

	"github.com/jobonce/jobonce/core"
)

// Stats counts what a Poller did with the messages it received.
type Stats struct {
	// Received counts messages received.
	Received int64
	// Ran counts messages whose handler succeeded (including LeaseLost,
	// Unrecorded and Unguarded outcomes).
	Ran int64
	// Duplicates counts messages whose key was already done.
	Duplicates int64
	// Running counts messages hidden because their job ran elsewhere.
	Running int64
	// Failed counts messages whose handler failed or panicked.
	Failed int64
	// Conflicts counts messages left for the dead-letter queue: key
	// conflicts and invalid keys.
	Conflicts int64
	// Unavailable counts messages not run because the store was unreachable.
	Unavailable int64
	// Canceled counts messages not run because the Poller stopped before
	// their claims were answered. They go back to the queue and are not
	// failures.
	Canceled int64
	// GivenUp counts FIFO messages given up after their retries in place,
	// and their later receives, handed back unrun.
	GivenUp int64
	// Deleted counts messages deleted.
	Deleted int64
	// DeleteErrors counts deletes that failed. Those messages come back as
	// duplicates.
	DeleteErrors int64
	// VisibilityErrors counts visibility changes that failed.
	VisibilityErrors int64
}

type counters struct {
	received, ran, duplicates, running, failed, conflicts, unavailable, canceled atomic.Int64
	givenUp, deleted, deleteErrors, visibilityErrors                             atomic.Int64
}

// Stats returns the Poller's counts so far. It is safe to call while Run runs.
func (p *Poller) Stats() Stats {
	c := &p.stats
	return Stats{
		Received: c.received.Load(), Ran: c.ran.Load(), Duplicates: c.duplicates.Load(),
		Running: c.running.Load(), Failed: c.failed.Load(), Conflicts: c.conflicts.Load(),
		Unavailable: c.unavailable.Load(), Canceled: c.canceled.Load(), GivenUp: c.givenUp.Load(), Deleted: c.deleted.Load(),
		DeleteErrors: c.deleteErrors.Load(), VisibilityErrors: c.visibilityErrors.Load(),
	}
}

// count records a final outcome in the stats.
func (c *counters) count(out core.Outcome) {
	switch out {
	case core.Ran, core.LeaseLost, core.Unrecorded, core.Unguarded:
		c.ran.Add(1)
	case core.Duplicate:
		c.duplicates.Add(1)
	case core.Running:
		c.running.Add(1)
	case core.Failed:
		c.failed.Add(1)
	case core.Unavailable:
		c.unavailable.Add(1)
	case core.Canceled:
		c.canceled.Add(1)
	default: // Conflict, Rejected
		c.conflicts.Add(1)
	}
}
