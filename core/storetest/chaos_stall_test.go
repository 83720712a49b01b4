package storetest

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
	var p stallProbe
	stop := make(chan struct{})
	done := p.start(stop)
	defer func() { close(stop); <-done }()

	before := time.Now()
	pid := strconv.Itoa(os.Getpid())
	cmd := exec.Command("sh", "-c", "kill -STOP "+pid+"; sleep 0.3; kill -CONT "+pid)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pausing the process: %v: %s", err, out)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, n := p.longest(before, time.Now()); n >= 250*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			_, n := p.longest(before, time.Now())
			t.Fatalf("the longest pause found is %s, want at least 250ms", n)
		}
		time.Sleep(stallTick) // a poll with a deadline
	}
	if _, n := p.longest(time.Time{}, before.Add(-time.Second)); n != 0 {
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
