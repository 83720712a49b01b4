package main

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
)

// listRow is one entry list printed.
type listRow struct {
	state, age, left, holder, stored string
}

var listRowLine = regexp.MustCompile(`(?m)^(running|past-lease|done) +(\S+) +(\S+) +(\S+) +(0x[0-9a-f]+) +"`)

// listRows returns the entries out printed, in order.
func listRows(out string) []listRow {
	var rows []listRow
	for _, m := range listRowLine.FindAllStringSubmatch(out, -1) {
		rows = append(rows, listRow{state: m[1], age: m[2], left: m[3], holder: m[4], stored: m[5]})
	}
	return rows
}

// storedFormOf returns the printed stored key of key under g.
func storedFormOf(t *testing.T, g *core.Guard, key string) string {
	t.Helper()
	stored, err := g.StoredKey(key)
	require.NoError(t, err)
	return storedForm(stored)
}

// TestListShowsTheRunningClaimsOldestFirstAndThoseHeldPastTheLease: on
// Redis, list prints the claims under -prefix oldest first, with their age,
// lease left and holder, marks the one held longer than -lease, counts the
// done markers and the prefix's other keys, lists the markers with -done,
// and leaves out other prefixes' keys.
func TestListShowsTheRunningClaimsOldestFirstAndThoseHeldPastTheLease(t *testing.T) {
	e := newReleaseEnv(t, core.Config{Lease: time.Minute})
	ctx := context.Background()
	old, fresh := driver.NewToken(), driver.NewToken()
	e.claim(t, "job-old", old, 10*time.Minute, 50*time.Second) // renewed for ten minutes
	e.claim(t, "job-fresh", fresh, 0, time.Minute)
	require.Equal(t, core.Ran, runJob(t, e.guard, "job-done"))
	require.NoError(t, e.client.Set(ctx, e.prefix+"foreign", "hello", time.Minute).Err())
	other := newReleaseEnv(t, core.Config{})
	other.claim(t, "job-elsewhere", driver.NewToken(), 0, time.Minute)

	r := runCLI(t, nil, nil, e.args("list", "-lease", "1m")...)
	require.Zero(t, r.status, "%s", r)
	require.Contains(t, r.stdout, `Redis database 0 at 127.0.0.1:6379, keys under -prefix "`+e.prefix+`":`)
	require.Contains(t, r.stdout, "STATE       AGE")
	rows := listRows(r.stdout)
	require.Len(t, rows, 2, "%s", r)
	require.Equal(t, listRow{state: "past-lease", age: rows[0].age, left: rows[0].left, holder: old.String()[:8], stored: storedFormOf(t, e.guard, "job-old")}, rows[0])
	require.Equal(t, listRow{state: "running", age: rows[1].age, left: rows[1].left, holder: fresh.String()[:8], stored: storedFormOf(t, e.guard, "job-fresh")}, rows[1])
	age, err := time.ParseDuration(rows[0].age)
	require.NoError(t, err)
	require.GreaterOrEqual(t, age, 10*time.Minute)
	left, err := time.ParseDuration(rows[0].left)
	require.NoError(t, err)
	require.LessOrEqual(t, left, 50*time.Second)
	require.Contains(t, r.stdout, "2 running claims, 1 held past -lease 1m0s; 1 done marker (-done lists them).\n")
	require.Contains(t, r.stdout, "1 other key under the prefix: neither a claim nor a marker")
	require.NotContains(t, r.stdout, storedFormOf(t, other.guard, "job-elsewhere"))

	r = runCLI(t, nil, nil, e.args("list", "-lease", "1m", "-done")...)
	require.Zero(t, r.status, "%s", r)
	rows = listRows(r.stdout)
	require.Len(t, rows, 3, "%s", r)
	require.Equal(t, "done", rows[2].state)
	require.Equal(t, "-", rows[2].age)
	require.Equal(t, "-", rows[2].holder)
	require.Equal(t, storedFormOf(t, e.guard, "job-done"), rows[2].stored)
	require.True(t, strings.HasPrefix(rows[2].left, "23h59m"), "retention left: %s", rows[2].left)

	r = runCLI(t, nil, nil, e.args("list", "-lease", "1m", "-done", "-limit", "1")...)
	require.Zero(t, r.status, "%s", r)
	require.Len(t, listRows(r.stdout), 1, "%s", r)
	require.Equal(t, "past-lease", listRows(r.stdout)[0].state)
	require.Contains(t, r.stdout, "1 of 3 shown (-limit 1).")

	// The stored key list prints is one inspect and release take.
	r = runCLI(t, nil, nil, e.args("inspect", rows[0].stored)...)
	require.Zero(t, r.status, "%s", r)
	require.Contains(t, r.stdout, "token "+old.String())
}

func TestListOfAPrefixWithNothingUnderItSaysSo(t *testing.T) {
	e := newReleaseEnv(t, core.Config{})
	r := runCLI(t, nil, nil, e.args("list")...)
	require.Zero(t, r.status, "%s", r)
	require.Empty(t, listRows(r.stdout))
	require.NotContains(t, r.stdout, "STATE")
	require.Contains(t, r.stdout, "0 running claims, 0 held past -lease 30s; 0 done markers.\n")
}

// TestListStopsAtTheScanBoundAndSaysWhatItLeftOut: with more keys than
// -scan, list reads one page of SCAN and says that claims among the rest
// are not listed.
func TestListStopsAtTheScanBoundAndSaysWhatItLeftOut(t *testing.T) {
	e := newReleaseEnv(t, core.Config{})
	ctx := context.Background()
	for i := range 200 {
		require.NoError(t, e.client.Set(ctx, e.prefix+"filler-"+strconv.Itoa(i), "hello", time.Minute).Err())
	}
	r := runCLI(t, nil, nil, e.args("list", "-scan", "10")...)
	require.Zero(t, r.status, "%s", r)
	require.Regexp(t, `The scan stopped after about 10 of the database's \d+ keys \(-scan 10\): claims among the rest are not listed\.`, r.stdout)
	// The page holds some of the prefix's keys, or none: the database is
	// shared with other tests' keys.
	n := 0
	if others := regexp.MustCompile(`(\d+) other keys? under the prefix`).FindStringSubmatch(r.stdout); others != nil {
		var err error
		n, err = strconv.Atoi(others[1])
		require.NoError(t, err)
	}
	require.Less(t, n, 200, "one page read, not the whole prefix: %s", r)

	r = runCLI(t, nil, nil, e.args("list")...)
	require.Zero(t, r.status, "%s", r)
	require.Contains(t, r.stdout, "200 other keys under the prefix")
	require.NotContains(t, r.stdout, "The scan stopped")
}

func TestListRefusesBadBounds(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"list", "-scan", "0"}, "jobonce: -scan: 0 is not positive"},
		{[]string{"list", "-limit", "-1"}, "jobonce: -limit: -1 is not positive"},
		{[]string{"list", "-lease", "0s"}, "jobonce: -lease: 0s is not positive"},
		{[]string{"list", "-prefix", ""}, "jobonce: -prefix: empty"},
		{[]string{"list", "-plain"}, "-plain (a flag of key, inspect, release and forget, not of list)"},
		{[]string{"list", "job-1"}, "jobonce: list takes no argument, got 1 arguments"},
	} {
		requireOneErrorLine(t, runCLI(t, nil, nil, c.args...), c.want)
	}
}
