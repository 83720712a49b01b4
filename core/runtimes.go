package core

import (
	"slices"
	"sync/atomic"
	"time"
)

// runSamples is how many of a kind's latest runs a Guard keeps the
// durations of, and minRunSamples how many it needs before it expects
// anything of the kind's runs.
const (
	runSamples    = 32
	minRunSamples = 5
)

// runTimes keeps the durations of a kind's latest runs that ended Ran, in a
// ring written without a lock, for the 90th percentile a copy that finds
// its job running is measured against (see Claim.waitUntil).
type runTimes struct {
	next atomic.Uint64
	d    [runSamples]atomic.Int64
}

func (r *runTimes) add(d time.Duration) {
	i := r.next.Add(1) - 1
	r.d[i%runSamples].Store(int64(d))
}

// p90 returns the 90th percentile of the durations kept, and false when
// fewer than minRunSamples runs were seen.
func (r *runTimes) p90() (time.Duration, bool) {
	n := min(r.next.Load(), runSamples)
	if n < minRunSamples {
		return 0, false
	}
	var ds [runSamples]int64
	for i := range n {
		ds[i] = r.d[i].Load()
	}
	s := ds[:n]
	slices.Sort(s)
	return time.Duration(s[(n*9+9)/10-1]), true
}
