package main

import (
	"os"
	"testing"
)

// TestDemoRuns runs the demo as `go -C examples run ./quickstart` does, on
// the embedded Redis: a demo that stops with an error (its exit status 1)
// fails the test binary.
func TestDemoRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo runs for several seconds")
	}
	t.Setenv("REDIS_URL", "")
	t.Setenv("DATABASE_URL", os.Getenv("TEST_DATABASE_URL"))
	main()
}
