package main

import (
	"strings"
	"testing"
)

// TestReportShowsFailuresTheirReplaysAndTheSlowestTests: a passing test's
// output is left out, a failed test's output is written whole, its replay
// line is repeated in the summary, a package that ended in a panic shows
// the panic, and the slowest tests are listed slowest first.
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
		`{"Action":"start","Package":"q"}`,
		`{"Action":"run","Package":"q","Test":"TestHangs"}`,
		`{"Action":"output","Package":"q","Test":"TestHangs","Output":"panic: test timed out after 40m0s\n"}`,
		`not json: a build error`,
	}, "\n")
	var out strings.Builder
	r := &report{out: &out, output: map[test][]string{}, started: map[string]bool{}, replays: map[test][]string{}}
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
		"failed tests:\n  p TestChaos/Wait\n      invariant 1 broken (replay: JOBONCE_CHAOS_SEED=42",
		"slowest tests:\n     7.0s p TestChaos\n     2.5s p TestQuiet\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "WARN noise") {
		t.Errorf("report shows a passing test's output:\n%s", got)
	}
	if r.failures != 4 {
		t.Errorf("failures = %d, want 4 (a test, its parent, its package and q)", r.failures)
	}
}
