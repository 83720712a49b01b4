package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReportShowsFailuresTheirReplaysAndTheSlowestTests: a passing test's
// output is left out, a failed test's output is written whole, the summary
// gives it the command that runs it again and repeats its seed line, a
// package that ended in a panic shows the panic, a package that did not
// build is named, a skipped test is listed with its reason, the tests'
// figures come before the summary, and the slowest tests are listed slowest
// first.
func TestReportShowsFailuresTheirReplaysAndTheSlowestTests(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"start","Package":"p"}`,
		`{"Action":"run","Package":"p","Test":"TestQuiet"}`,
		`{"Action":"output","Package":"p","Test":"TestQuiet","Output":"WARN noise\n"}`,
		`{"Action":"pass","Package":"p","Test":"TestQuiet","Elapsed":2.5}`,
		`{"Action":"run","Package":"p","Test":"TestChaos"}`,
		`{"Action":"output","Package":"p","Test":"TestChaos/Wait","Output":"invariant 1 broken (replay: JOBONCE_CHAOS_SEED=42 go test -run 'TestChaos/Wait')\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestChaos/Wait","Elapsed":1}`,
		`{"Action":"fail","Package":"p","Test":"TestChaos","Elapsed":7}`,
		`{"Action":"fail","Package":"p","Elapsed":9.5}`,
		`{"Action":"run","Package":"p","Test":"TestNeedsMoto"}`,
		`{"Action":"output","Package":"p","Test":"TestNeedsMoto","Output":"=== RUN   TestNeedsMoto\n"}`,
		`{"Action":"output","Package":"p","Test":"TestNeedsMoto","Output":"    helpers_test.go:9: TEST_MOTO_ENDPOINT is not set\n"}`,
		`{"Action":"output","Package":"p","Test":"TestNeedsMoto","Output":"--- SKIP: TestNeedsMoto (0.00s)\n"}`,
		`{"Action":"skip","Package":"p","Test":"TestNeedsMoto"}`,
		`{"ImportPath":"b [b.test]","Action":"build-fail"}`,
		`{"Action":"start","Package":"q"}`,
		`{"Action":"run","Package":"q","Test":"TestHangs"}`,
		`{"Action":"output","Package":"q","Test":"TestHangs","Output":"panic: test timed out after 40m0s\n"}`,
		`not json: a build error`,
	}, "\n")
	var out strings.Builder
	figures := filepath.Join(t.TempDir(), "figures")
	if err := os.WriteFile(figures, []byte("TestZ: 3 runs\nTestA: 0 missing\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := &report{out: &out, figures: figures, output: map[test][]string{}, started: map[string]bool{}, replays: map[test][]string{}}
	if err := r.read(strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	r.summary()
	got := out.String()
	for _, want := range []string{
		"invariant 1 broken",
		"FAIL p 9.5s",
		"not json: a build error",
		"FAIL q: the test binary ended without a result\npanic: test timed out",
		"figures reported by the tests:\nTestA: 0 missing\nTestZ: 3 runs\n",
		"skipped tests: 1\n  p TestNeedsMoto: helpers_test.go:9: TEST_MOTO_ENDPOINT is not set\n",
		"failed packages:\n  p\n  b [b.test] (build failed)\n  q\n",
		"failed tests, each with the command that runs it again:\n  p TestChaos/Wait\n      go test -race -count=1 -run '^TestChaos$/^Wait$' p\n      invariant 1 broken (replay: JOBONCE_CHAOS_SEED=42",
		"slowest tests:\n     7.0s p TestChaos\n     2.5s p TestQuiet\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "WARN noise") {
		t.Errorf("report shows a passing test's output:\n%s", got)
	}
	if r.failures != 5 {
		t.Errorf("failures = %d, want 5 (a test, its parent, its package, b's build and q)", r.failures)
	}
}
