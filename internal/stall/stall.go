// Package stall measures when the test process was held up: a thread of it
// waiting for a CPU (the operating system ran another), so that the P it
// holds ran none of its goroutines and timers while the other P's ran
// theirs on time; goroutines waiting in the Go scheduler's run queues for a
// turn; or the whole process stopped. A Probe records them from its own
// timers, the runtime's histogram of the time goroutines spent runnable
// before they ran (runtime/metrics /sched/latencies, sampled), the time each
// thread waited on the operating system's run queue (Linux's schedstat),
// and the lateness of any timer a test hands it (Probe.Late). A test that
// bounds how long something may take subtracts the stalls (see
// Probe.RequireWithin); the chaos harness excuses lease timing the stalls
// explain. At normal load stalls are rare and short, so bounds keep their
// edge.
package stall

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Span is a stretch of time.
type Span struct{ From, To time.Time }

// tick is how often the probe wakes.
const tick = time.Millisecond

// Min is the shortest stall a Probe keeps.
const Min = 2 * time.Millisecond

// Probe records the stalls of the test process from its Start to its Stop.
type Probe struct {
	mu    sync.Mutex
	spans []Span
	stop  chan struct{}
	done  chan struct{}
}

// timers is how many goroutines of the probe wake every tick.
// A timer runs on the P (the runtime's processor) it was set on, and a P
// busy with one goroutine runs its timers late while the others run theirs
// on time, as the race detector's calls into C cannot be preempted: timers
// on several goroutines, each set anew on whichever P it runs on, see a
// late P that one timer might miss.
func timers() int { return max(4, 2*runtime.GOMAXPROCS(0)) }

// Start starts a Probe, which measures stalls from now until Stop. The
// first wakes of its timers are due from now, not from when its goroutines
// first run, so a stall before then is measured too.
func Start() *Probe {
	p := &Probe{stop: make(chan struct{}), done: make(chan struct{})}
	n := timers()
	now := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		t := time.NewTimer(tick)
		var waits *schedWaits
		if i == 0 {
			waits = newSchedWaits()
		}
		wg.Go(func() { p.tick(t, now.Add(tick), waits) })
	}
	if threads := newThreadDelays(); threads != nil {
		wg.Go(func() { p.watchThreads(threads) })
	}
	go func() {
		wg.Wait()
		close(p.done)
	}()
	return p
}

// Stop stops p's goroutines and waits for them to end. It is safe to call
// more than once.
func (p *Probe) Stop() {
	p.mu.Lock()
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	p.mu.Unlock()
	<-p.done
}

// threadTick is how often the probe reads its threads' run-queue delays.
const threadTick = 5 * time.Millisecond

// watchThreads reads the process's threads' run-queue delays every
// threadTick until Stop: a thread that waited d for a CPU since
// the last read waited through [now-d, now], by the latest read.
func (p *Probe) watchThreads(threads *threadDelays) {
	t := time.NewTicker(threadTick)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			now := time.Now()
			if d := threads.longestSince(); d >= Min {
				p.add(Span{From: now.Add(-d), To: now})
			}
		}
	}
}

// tick wakes every tick until Stop, recording how late its
// timer fired and, when waits is set, the waits the runtime counted.
func (p *Probe) tick(t *time.Timer, due time.Time, waits *schedWaits) {
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C: // its value may be the time the timer was due
			now := time.Now()
			if late := now.Sub(due); late >= Min {
				p.add(Span{From: due, To: now})
			}
			// A goroutine that began to run since the last read, after
			// waiting at least w, waited through [now-w, last] at least.
			if w := waits.longestSince(); w >= Min && now.Add(-w).Before(last) {
				p.add(Span{From: now.Add(-w), To: last})
			}
			last = now
			due = time.Now().Add(tick)
			t.Reset(tick)
		}
	}
}

// Late records a timer of the test's own that was due at due and woke its
// goroutine at fired: the timers and goroutines of the P it ran on were
// held up that long. A test's timers, set on every P, see a busy P the
// probe's own may miss.
func (p *Probe) Late(due, fired time.Time) {
	if fired.Sub(due) >= Min {
		p.add(Span{From: due, To: fired})
	}
}

func (p *Probe) add(s Span) {
	p.mu.Lock()
	p.spans = append(p.spans, s)
	p.mu.Unlock()
}

// threadDelays reads how long each thread of the process waited on the
// operating system's run queue (Linux: /proc/self/task/*/schedstat, its
// second field): a thread that holds a P and waits for a CPU delays that
// P's goroutines and timers while the other P's run on time.
type threadDelays struct {
	delay map[string]int64 // nanoseconds waited so far, by schedstat file
}

// newThreadDelays returns nil where the system does not say.
func newThreadDelays() *threadDelays {
	t := &threadDelays{delay: make(map[string]int64)}
	if files, _ := filepath.Glob("/proc/self/task/*/schedstat"); len(files) == 0 {
		return nil
	}
	t.longestSince()
	return t
}

// longestSince returns the longest wait of one thread since the last call.
func (t *threadDelays) longestSince() time.Duration {
	files, _ := filepath.Glob("/proc/self/task/*/schedstat")
	var longest int64
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		fields := strings.Fields(string(b))
		if len(fields) < 2 {
			continue
		}
		d, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			continue
		}
		if prev, ok := t.delay[f]; ok {
			longest = max(longest, d-prev)
		}
		t.delay[f] = d
	}
	return time.Duration(longest)
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
// the last call: zero when none was, the runtime does not report waits, or
// w is nil.
func (w *schedWaits) longestSince() time.Duration {
	if w == nil {
		return 0
	}
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

// Longest returns the longest stall that overlaps [from, to], and its
// length (zero when none does).
func (p *Probe) Longest(from, to time.Time) (Span, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var best Span
	var n time.Duration
	for _, s := range p.spans {
		if s.To.Before(from) || s.From.After(to) {
			continue
		}
		if d := s.To.Sub(s.From); d > n {
			best, n = s, d
		}
	}
	return best, n
}

// Within returns how much of [from, to] the stalls cover.
func (p *Probe) Within(from, to time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var in []Span
	for _, s := range p.spans {
		if s.To.After(from) && s.From.Before(to) {
			in = append(in, s)
		}
	}
	slices.SortFunc(in, func(a, b Span) int { return a.From.Compare(b.From) })
	var covered time.Duration
	cursor := from
	for _, s := range in {
		a, b := latest(s.From, cursor), earliest(s.To, to)
		if b.After(a) {
			covered += b.Sub(a)
			cursor = b
		}
	}
	return covered
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Bound starts a Probe that measures stalls for the rest of t, for its
// RequireWithin.
func Bound(t testing.TB) *Probe {
	p := Start()
	t.Cleanup(p.Stop)
	return p
}

// RequireWithin fails t, with the message format and args, when more than
// bound has passed since start, less the time the test process was
// stalled meanwhile: a bound on how long code may take holds for the time
// the process ran it.
func (p *Probe) RequireWithin(t testing.TB, start time.Time, bound time.Duration, format string, args ...any) {
	t.Helper()
	now := time.Now()
	took, stalled := now.Sub(start), p.Within(start, now)
	if took-stalled > bound {
		t.Fatalf("%s: took %s (%s of it stalled), over %s", fmt.Sprintf(format, args...), took.Round(time.Millisecond), stalled.Round(time.Millisecond), bound)
	}
}
