package watermillonce

import (
	"context"
	"time"
)

// waitUntil returns how long a copy that finds its job running waits for
// that copy's outcome (core.Job.WaitUntil): Config.WaitRunning from now.
// Zero: no wait.
func (m *middleware) waitUntil() time.Time {
	if m.cfg.WaitRunning < 0 {
		return time.Time{}
	}
	return time.Now().Add(m.cfg.WaitRunning)
}

// pause waits d, or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
