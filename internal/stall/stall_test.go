package stall

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestStallProbeMeasuresAPauseOfTheProcess: stopped by SIGSTOP for 300 ms
// and resumed by SIGCONT from another process, the test process finds a
// pause of at least 250 ms covering that time; before it, none.
func TestStallProbeMeasuresAPauseOfTheProcess(t *testing.T) {
	p := Start()
	defer p.Stop()

	before := time.Now()
	pid := strconv.Itoa(os.Getpid())
	cmd := exec.Command("sh", "-c", "kill -STOP "+pid+"; sleep 0.3; kill -CONT "+pid)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pausing the process: %v: %s", err, out)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, n := p.Longest(before, time.Now()); n >= 250*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			_, n := p.Longest(before, time.Now())
			t.Fatalf("the longest pause found is %s, want at least 250ms", n)
		}
		time.Sleep(tick) // a poll with a deadline
	}
	if _, n := p.Longest(time.Time{}, before.Add(-time.Second)); n != 0 {
		t.Fatalf("a pause of %s found before the process was stopped", n)
	}
}

// TestSchedWaitsMeasureGoroutinesWaitingToRun: with one P and eight
// goroutines that each compute for 2 ms between yields, a goroutine waits
// about 14 ms in the run queue for its turn, and the runtime's histogram,
// read by the stall probe, shows such waits.
func TestSchedWaitsMeasureGoroutinesWaitingToRun(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	waits := newSchedWaits()
	var wg sync.WaitGroup
	quit := time.Now().Add(300 * time.Millisecond)
	for range 8 {
		wg.Go(func() {
			for time.Now().Before(quit) {
				for spin := time.Now(); time.Since(spin) < 2*time.Millisecond; {
				}
				runtime.Gosched()
			}
		})
	}
	wg.Wait()
	if w := waits.longestSince(); w < 5*time.Millisecond {
		t.Fatalf("the longest wait to run found is %s, want at least 5ms", w)
	}
}

// TestThreadDelaysMeasureThreadsWaitingForACPU: with twice as many threads
// computing as the machine has CPUs, for 300 ms, each waits on the
// operating system's run queue for part of that time, and the probe's
// reader of thread delays sees such a wait.
func TestThreadDelaysMeasureThreadsWaitingForACPU(t *testing.T) {
	threads := newThreadDelays()
	if threads == nil {
		if runtime.GOOS == "linux" {
			t.Fatal("no /proc/self/task/*/schedstat on Linux")
		}
		t.Skipf("%s does not report threads' run-queue delays", runtime.GOOS)
	}
	n := 2 * runtime.NumCPU()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(n))
	var wg sync.WaitGroup
	quit := time.Now().Add(300 * time.Millisecond)
	for range n {
		wg.Go(func() {
			for time.Now().Before(quit) {
			}
		})
	}
	wg.Wait()
	if d := threads.longestSince(); d < 5*time.Millisecond {
		t.Fatalf("the longest wait for a CPU found is %s, want at least 5ms", d)
	}
}

// TestRequireWithinSubtractsStalls: a call that took 400 ms of which the
// process was stalled for 300 ms is within a 250 ms bound; one that took
// 400 ms unstalled is not.
func TestRequireWithinSubtractsStalls(t *testing.T) {
	var p Probe
	start := time.Now().Add(-400 * time.Millisecond)
	p.add(Span{From: start.Add(50 * time.Millisecond), To: start.Add(350 * time.Millisecond)})
	var stalled fakeT
	p.RequireWithin(&stalled, start, 250*time.Millisecond, "a stalled call")
	if stalled.failed {
		t.Fatal("a call 400ms long, 300ms of it stalled, was taken as over 250ms")
	}
	var q Probe
	var slow fakeT
	q.RequireWithin(&slow, start, 250*time.Millisecond, "a slow call")
	if !slow.failed {
		t.Fatal("a call 400ms long, unstalled, was taken as within 250ms")
	}
}

// fakeT records a failure without ending the test.
type fakeT struct {
	testing.TB
	failed bool
}

func (f *fakeT) Helper() {}

func (f *fakeT) Fatalf(string, ...any) { f.failed = true }
