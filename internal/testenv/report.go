package testenv

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

var reportMu sync.Mutex

// Report logs a test's headline figure (a drill's or a crash test's
// counts) and, when JOBONCE_REPORT names a file, appends it there, so that
// the test script prints the figures of passing tests too.
func Report(t testing.TB, format string, args ...any) {
	t.Helper()
	line := fmt.Sprintf(format, args...)
	t.Log(line)
	path := os.Getenv("JOBONCE_REPORT")
	if path == "" {
		return
	}
	reportMu.Lock()
	defer reportMu.Unlock()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("JOBONCE_REPORT: %v", err)
		return
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "%s: %s\n", t.Name(), line); err != nil {
		t.Errorf("JOBONCE_REPORT: %v", err)
	}
}
