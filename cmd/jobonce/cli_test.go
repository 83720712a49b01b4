package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// commandPath is the command, built by TestMain for the tests that run it as an
// operator does.
var commandPath string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "jobonce-cmd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	commandPath = filepath.Join(dir, "jobonce")
	args := []string{"build", "-o", commandPath}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, ".")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building the command: %v\n", err)
		return 1
	}
	return m.Run()
}

// cliRun is what a run of the built command printed, and its exit status.
type cliRun struct {
	stdout, stderr string
	status         int
}

// String shows the run, for a failed assertion.
func (r cliRun) String() string {
	return fmt.Sprintf("exit status %d\nstdout:\n%s\nstderr:\n%s", r.status, r.stdout, r.stderr)
}

// runCLI runs the built command with args, stdin as its input and env
// ("NAME=value") in its environment, where neither REDIS_URL nor
// DATABASE_URL is set otherwise. A command built with the race detector
// exits without its 1s wait for other reports (GORACE): a race it found is
// on stderr, and its exit status 66.
func runCLI(t *testing.T, stdin io.Reader, env []string, args ...string) cliRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, commandPath, args...)
	cmd.Env = append(commandEnv(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &out, &errOut
	run := cliRun{}
	if err := cmd.Run(); err != nil {
		exit, ok := err.(*exec.ExitError)
		require.True(t, ok, "%v", err)
		run.status = exit.ExitCode()
	}
	run.stdout, run.stderr = out.String(), errOut.String()
	return run
}

// commandEnv returns the environment the command runs in, but for the
// variables a test sets.
func commandEnv() []string {
	return append(environWithout("REDIS_URL", "DATABASE_URL", "GORACE"), "GORACE=atexit_sleep_ms=0")
}

// environWithout returns the test's environment without the variables
// names.
func environWithout(names ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, n := range names {
			keep = keep && name != n
		}
		if keep {
			env = append(env, kv)
		}
	}
	return env
}

// runCommand runs the built command with REDIS_URL set to redisURL and
// nothing on stdin, and returns what it printed and its exit status.
func runCommand(t *testing.T, redisURL string, args ...string) (stdout, stderr string, status int) {
	t.Helper()
	r := runCLI(t, nil, []string{"REDIS_URL=" + redisURL}, args...)
	return r.stdout, r.stderr, r.status
}

// requireOneErrorLine asserts that r printed exactly one line on stderr,
// jobonce's own, holding want.
func requireOneErrorLine(t *testing.T, r cliRun, want string) {
	t.Helper()
	require.Equal(t, 1, r.status, "%s", r)
	require.True(t, strings.HasPrefix(r.stderr, "jobonce: "), "%s", r)
	require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line on stderr: %s", r)
	require.True(t, strings.HasSuffix(r.stderr, "\n"), "%s", r)
	require.Contains(t, r.stderr, want, "%s", r)
}
