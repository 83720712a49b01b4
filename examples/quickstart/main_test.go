package main

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/internal/pgtest"
	"github.com/jobonce/jobonce/internal/testenv"
)

// demoRun is the demo's one run in this test binary, shared by the tests
// that read its output.
var demoRun struct {
	once sync.Once
	out  string
	err  error
}

// demoOutput runs the demo once, as `go -C examples run ./quickstart` does
// on the embedded Redis, with the transactional row on the test PostgreSQL,
// and returns what it printed.
func demoOutput(t *testing.T) string {
	t.Helper()
	testenv.Short(t)
	demoRun.once.Do(func() {
		t.Setenv("REDIS_URL", "")
		t.Setenv("DATABASE_URL", pgtest.DatabaseURL())
		var out bytes.Buffer
		demoRun.err = demo(&out)
		demoRun.out = out.String()
	})
	require.NoError(t, demoRun.err, "the demo stopped with an error; it printed:\n%s", demoRun.out)
	return demoRun.out
}

// TestDemoRunsEveryRow runs the demo and finds a row for every strategy,
// the transactional one included.
func TestDemoRunsEveryRow(t *testing.T) {
	out := demoOutput(t)
	t.Logf("the demo printed:\n%s", out)
	table := demoTable(t, out)
	var names []string
	for _, s := range strategies() {
		names = append(names, s.name)
	}
	require.Equal(t, names, table.rows(), "the demo printed:\n%s", out)
	require.NotContains(t, out, "skipped")
	require.True(t, strings.HasSuffix(out, conclusion))
}
