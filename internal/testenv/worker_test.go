package testenv

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

const workerModeEnv = "JOBONCE_TESTENV_WORKER_MODE"

// TestWorkerChild is the worker of TestWorker; it returns at once unless
// started by it. It prints three lines, then, by mode, returns ("exit"),
// fails ("fail") or serves until SIGTERM ("serve").
func TestWorkerChild(t *testing.T) {
	if !IsWorker(t) {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	fmt.Println("one")
	fmt.Println("two")
	fmt.Println("three")
	switch os.Getenv(workerModeEnv) {
	case "fail":
		t.Fatal("failing on purpose")
	case "serve":
		<-ctx.Done()
	}
}

func TestWorker(t *testing.T) {
	start := func(t *testing.T, mode string) *Worker {
		return StartWorker(t, "TestWorkerChild", workerModeEnv+"="+mode)
	}
	t.Run("lines in order, once each", func(t *testing.T) {
		w := start(t, "exit")
		var seen []string
		line, err := w.WaitFor(time.Minute, func(line string) bool {
			seen = append(seen, line)
			return strings.HasPrefix(line, "tw")
		})
		if err != nil || line != "two" || strings.Join(seen, ",") != "one,two" {
			t.Fatalf("WaitFor: %q %v, seen %q", line, err, seen)
		}
		if line, err := w.WaitFor(time.Minute, func(l string) bool { return l == "one" || l == "three" }); line != "three" {
			t.Fatalf("WaitFor after two: %q %v", line, err)
		}
		if _, err := w.WaitFor(time.Minute, func(string) bool { return false }); err == nil {
			t.Fatal("WaitFor: no error when the worker exited")
		}
		if err := w.Wait(time.Minute); err != nil {
			t.Fatalf("Wait: %v", err)
		}
		if out := w.Output(); !strings.HasPrefix(out, "one\ntwo\nthree") {
			t.Fatalf("Output: %q", out)
		}
	})
	t.Run("a failed test is an exit error", func(t *testing.T) {
		if err := start(t, "fail").Wait(time.Minute); err == nil {
			t.Fatal("Wait: no error")
		}
	})
	t.Run("stop", func(t *testing.T) {
		w := start(t, "serve")
		if _, err := w.WaitFor(time.Minute, func(l string) bool { return l == "three" }); err != nil {
			t.Fatal(err)
		}
		if err := w.Stop(time.Minute); err != nil {
			t.Fatalf("Stop: %v", err)
		}
	})
	t.Run("kill, and a deadline", func(t *testing.T) {
		w := start(t, "serve")
		start := time.Now()
		if _, err := w.WaitFor(200*time.Millisecond, func(string) bool { return false }); err == nil {
			t.Fatal("WaitFor: no error at the deadline")
		}
		if waited := time.Since(start); waited < 200*time.Millisecond {
			t.Fatalf("WaitFor gave up after %s", waited)
		}
		if err := w.Kill(); err != nil {
			t.Fatalf("Kill: %v", err)
		}
		if err := w.Wait(time.Minute); err == nil {
			t.Fatal("Wait after Kill: no error")
		}
		if err := w.Kill(); err == nil {
			t.Fatal("Kill of an exited worker: no error")
		}
	})
}
