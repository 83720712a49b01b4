package core

import (
	"time"

	"github.com/jobonce/jobonce/internal/signal"
)

// SetListenerIdle sets how long g's completion signal keeps its Listener
// open once no copy waits; call it before the first wait.
func SetListenerIdle(g *Guard, d time.Duration) { g.signal.SetIdle(d) }

// NotifyBurst and NotifyEvery bound how often one key's notifications wake
// its copies.
const (
	NotifyBurst = signal.NotifyBurst
	NotifyEvery = signal.NotifyEvery
)
