package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// workerEnv names, in a worker process's environment, the test function it
// was started to run.
const workerEnv = "JOBONCE_TEST_WORKER"

// IsWorker reports whether this process is a worker started by StartWorker
// to run the test t. A worker test function returns at once when it is not:
//
//	func TestCrashWorker(t *testing.T) {
//		if !testenv.IsWorker(t) {
//			return
//		}
//		…
//	}
func IsWorker(t testing.TB) bool { return os.Getenv(workerEnv) == t.Name() }

// Worker is a child process running the current test binary with one test
// function selected: a worker that a crash test kills mid-run (Kill), stops
// (Stop) or lets finish (Wait), reading its standard output line by line.
type Worker struct {
	name string
	cmd  *exec.Cmd
	out  lineBuffer
	next int           // the first line WaitFor has not yet looked at
	done chan struct{} // closed once the process has exited and its output is read
	err  error         // the process's exit error, set before done is closed
}

// StartWorker starts the current test binary running only the test function
// name, with env (KEY=value pairs) added to this process's environment. The
// worker's standard output is captured (WaitFor, Output); its standard error
// goes to this process's. At the end of the test a worker still running is
// killed, and when the test failed the worker's output is logged.
func StartWorker(t testing.TB, name string, env ...string) *Worker {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+regexp.QuoteMeta(name)+"$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), workerEnv+"="+name), env...)
	w := &Worker{name: name, cmd: cmd, done: make(chan struct{})}
	w.out.changed = make(chan struct{})
	cmd.Stdout, cmd.Stderr = &w.out, os.Stderr
	cmd.WaitDelay = 10 * time.Second // for output held open by a process the worker started
	if err := cmd.Start(); err != nil {
		t.Fatalf("start worker %s: %v", name, err)
	}
	go func() {
		w.err = cmd.Wait()
		w.out.flush()
		close(w.done)
	}()
	t.Cleanup(func() {
		_ = w.Kill()
		if t.Failed() {
			t.Logf("output of worker %s:\n%s", name, w.Output())
		}
	})
	return w
}

// WaitFor passes the worker's output lines to match, in order, each line
// once across calls, until match returns true, and returns that line. It
// returns an error when the worker exits first or within passes first.
func (w *Worker) WaitFor(within time.Duration, match func(line string) bool) (string, error) {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	exited := false
	for {
		lines, changed := w.out.since(w.next)
		for _, line := range lines {
			w.next++
			if match(line) {
				return line, nil
			}
		}
		if exited {
			return "", fmt.Errorf("worker %s exited (%v) before the line awaited", w.name, w.err)
		}
		select {
		case <-changed:
		case <-w.done:
			exited = true // read the last lines, then give up
		case <-deadline.C:
			return "", fmt.Errorf("worker %s: the line awaited did not come within %s", w.name, within)
		}
	}
}

// Output returns the worker's standard output so far.
func (w *Worker) Output() string {
	lines, _ := w.out.since(0)
	return strings.Join(lines, "\n")
}

// Kill kills the worker with SIGKILL and waits for it to exit. It returns
// the error of the kill: os.ErrProcessDone when the worker had exited.
func (w *Worker) Kill() error {
	err := w.cmd.Process.Kill()
	<-w.done
	return err
}

// Stop sends the worker SIGTERM and returns its exit error, as Wait.
func (w *Worker) Stop(within time.Duration) error {
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	return w.Wait(within)
}

// Wait waits for the worker to exit and returns its exit error: nil when its
// test passed. A worker still running after within is killed, with an error.
func (w *Worker) Wait(within time.Duration) error {
	select {
	case <-w.done:
		return w.err
	case <-time.After(within):
		_ = w.Kill()
		return fmt.Errorf("worker %s still running after %s: killed", w.name, within)
	}
}

// lineBuffer collects what is written to it as lines.
type lineBuffer struct {
	mu      sync.Mutex
	lines   []string
	partial []byte        // the last line, until its newline
	changed chan struct{} // closed, and replaced, when lines grows
}

func (b *lineBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.partial = append(b.partial, p...)
	n := len(b.lines)
	for {
		i := bytes.IndexByte(b.partial, '\n')
		if i < 0 {
			break
		}
		b.lines = append(b.lines, string(b.partial[:i]))
		b.partial = b.partial[i+1:]
	}
	if len(b.lines) > n {
		b.notify()
	}
	return len(p), nil
}

// flush ends the last line, when it has no newline.
func (b *lineBuffer) flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.partial) > 0 {
		b.lines = append(b.lines, string(b.partial))
		b.partial = nil
		b.notify()
	}
}

func (b *lineBuffer) notify() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// since returns the lines from index i on, and a channel closed when more
// come.
func (b *lineBuffer) since(i int) ([]string, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lines[i:len(b.lines):len(b.lines)], b.changed
}
