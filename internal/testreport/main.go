// Command testreport reads `go test -json` on standard input and writes
// what a reader of a CI log needs: a line per package, the whole output of
// each test that failed (and of a package that failed outside its tests),
// and at the end the figures the tests reported (the file named by
// JOBONCE_REPORT), the skipped tests, the failed packages, the failed tests
// with the commands that replay them (with their JOBONCE_…SEED=… lines),
// and the ten slowest tests. It exits 1 when a test or package failed, or
// the input ended before a package finished.
//
//	go test -json work | go run ./internal/testreport
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
)

// event is one line of `go test -json` (see `go doc test2json`).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
	// ImportPath names the package of a build-output or build-fail event.
	ImportPath string
}

type test struct{ pkg, name string }

type report struct {
	out        io.Writer
	figures    string            // the file of figures the tests reported, if any
	output     map[test][]string // output of tests (and packages) still running
	started    map[string]bool   // packages started and not finished
	failed     []test
	failedPkgs []string
	skipped    []skip
	replays    map[test][]string
	timings    []timing
	failures   int
}

// skip is a test that skipped, and why.
type skip struct {
	t      test
	reason string
}

type timing struct {
	t       test
	elapsed float64
}

// replayLine matches the lines of a test's output that say how to replay it.
var replayLine = regexp.MustCompile(`JOBONCE_[A-Z_]*SEED=\d+`)

func main() {
	r := &report{out: os.Stdout, figures: os.Getenv("JOBONCE_REPORT"), output: make(map[test][]string),
		started: make(map[string]bool), replays: make(map[test][]string)}
	if err := r.read(os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	r.summary()
	if r.failures > 0 {
		os.Exit(1)
	}
}

func (r *report) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(r.out, sc.Text()) // a build error or other plain output
			continue
		}
		r.event(e)
	}
	return sc.Err()
}

func (r *report) event(e event) {
	t := test{e.Package, e.Test}
	switch e.Action {
	case "start":
		r.started[e.Package] = true
	case "output":
		r.output[t] = append(r.output[t], e.Output)
		if replayLine.MatchString(e.Output) {
			r.replays[t] = append(r.replays[t], strings.TrimSpace(e.Output))
		}
	case "pass", "skip":
		if e.Action == "skip" && e.Test != "" {
			r.skipped = append(r.skipped, skip{t, skipReason(r.output[t])})
		}
		delete(r.output, t)
		if e.Test == "" {
			delete(r.started, e.Package)
			fmt.Fprintf(r.out, "ok   %s %.1fs\n", e.Package, e.Elapsed)
		} else if !strings.Contains(e.Test, "/") {
			r.timings = append(r.timings, timing{t, e.Elapsed})
		}
	case "build-output":
		fmt.Fprint(r.out, e.Output)
	case "build-fail":
		r.failures++
		r.failedPkgs = append(r.failedPkgs, cmp.Or(e.ImportPath, e.Package)+" (build failed)")
	case "fail":
		r.failures++
		if e.Test == "" {
			delete(r.started, e.Package)
			r.flushPackage(e.Package)
			r.failedPkgs = append(r.failedPkgs, e.Package)
			fmt.Fprintf(r.out, "FAIL %s %.1fs\n", e.Package, e.Elapsed)
			return
		}
		r.failed = append(r.failed, t)
		if !strings.Contains(e.Test, "/") {
			r.timings = append(r.timings, timing{t, e.Elapsed})
		}
		r.flush(t)
	}
}

// flushPackage writes what pkg's tests still running and pkg itself
// printed (a panic, a timeout), and forgets it.
func (r *report) flushPackage(pkg string) {
	var tests []test
	for t := range r.output {
		if t.pkg == pkg && t.name != "" {
			tests = append(tests, t)
		}
	}
	slices.SortFunc(tests, func(a, b test) int { return cmp.Compare(a.name, b.name) })
	for _, t := range tests {
		r.flush(t)
	}
	r.flush(test{pkg, ""})
}

// flush writes what t printed, and forgets it.
func (r *report) flush(t test) {
	for _, line := range r.output[t] {
		fmt.Fprint(r.out, line)
	}
	delete(r.output, t)
}

func (r *report) summary() {
	for pkg := range r.started {
		r.failures++
		fmt.Fprintf(r.out, "FAIL %s: the test binary ended without a result\n", pkg)
		r.flushPackage(pkg)
		r.failedPkgs = append(r.failedPkgs, pkg)
	}
	if r.figures != "" {
		if b, err := os.ReadFile(r.figures); err == nil && len(b) > 0 {
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			slices.Sort(lines)
			fmt.Fprintln(r.out, "\nfigures reported by the tests:")
			fmt.Fprintln(r.out, strings.Join(lines, "\n"))
		}
	}
	if len(r.skipped) > 0 {
		fmt.Fprintf(r.out, "\nskipped tests: %d\n", len(r.skipped))
		for _, s := range r.skipped {
			fmt.Fprintf(r.out, "  %s %s: %s\n", s.t.pkg, s.t.name, s.reason)
		}
	}
	if len(r.failedPkgs) > 0 {
		fmt.Fprintln(r.out, "\nfailed packages:")
		for _, pkg := range r.failedPkgs {
			fmt.Fprintf(r.out, "  %s\n", pkg)
		}
	}
	if len(r.failed) > 0 {
		fmt.Fprintln(r.out, "\nfailed tests, each with the command that runs it again:")
		for _, t := range r.failed {
			fmt.Fprintf(r.out, "  %s %s\n", t.pkg, t.name)
			fmt.Fprintf(r.out, "      go test -race -count=1 -run '%s' %s\n", runPattern(t.name), t.pkg)
			for _, line := range r.replays[t] {
				fmt.Fprintf(r.out, "      %s\n", line)
			}
		}
	}
	slices.SortFunc(r.timings, func(a, b timing) int { return cmp.Compare(b.elapsed, a.elapsed) })
	fmt.Fprintln(r.out, "\nslowest tests:")
	for _, tm := range r.timings[:min(10, len(r.timings))] {
		fmt.Fprintf(r.out, "  %6.1fs %s %s\n", tm.elapsed, tm.t.pkg, tm.t.name)
	}
}

// runPattern returns the -run pattern that selects the test named name
// alone: each level of it anchored and quoted.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// skipReason returns the message of a skipped test's output: its last line
// that is not the "--- SKIP" line or a "=== " marker.
func skipReason(output []string) string {
	for i := len(output) - 1; i >= 0; i-- {
		line := strings.TrimSpace(output[i])
		if line == "" || strings.HasPrefix(line, "--- SKIP") || strings.HasPrefix(line, "=== ") {
			continue
		}
		return line
	}
	return "no reason given"
}
