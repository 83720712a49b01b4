package core

import (
	"time"

	"github.com/jobonce/jobonce/core/driver"
)

// A claim whose holder crashed, froze or lost the store holds its key
// until its lease lapses, and its holder reports nothing. Copies of the
// job can tell: the heartbeat renews a claim every third of its Lease, so
// a running claim with less than a third of its Lease left has not been
// renewed for two periods; and a copy that waits for a running claim and
// claims the key once that claim's lease has run out took it over. Such a
// copy is counted in jobonce.claims.stale. Both assume the holder's Lease
// is this Guard's.

// noteRunning notes the claim's answer, a key held by another claim (one
// with a fence, not a transaction): stale when it has under a third of
// Lease left, unless this Guard's heartbeat is off (its claims are never
// renewed), and when it lapses unless renewed.
func (c *Claim) noteRunning() {
	r := c.reply
	if r.State != driver.StateRunning || r.Fence <= 0 || r.Remaining <= 0 {
		return
	}
	c.lapse = time.Now().Add(r.Remaining)
	if r.Remaining < c.g.cfg.Lease/3 && !c.g.cfg.DisableHeartbeat {
		c.stale = true
	}
}

// noteTakeover notes that a claim that waited for a running claim now
// holds the key: stale when the running claim's lease had run out, as it
// was last read, rather than being released.
func (c *Claim) noteTakeover() {
	if !c.lapse.IsZero() && !time.Now().Before(c.lapse) {
		c.stale = true
	}
}
