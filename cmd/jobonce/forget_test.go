package main

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
)

// runJob runs key's job on g once and returns whether it ran.
func runJob(t *testing.T, g *core.Guard, key string) core.Outcome {
	t.Helper()
	o, err := g.Do(context.Background(), key, func(context.Context) error { return nil })
	require.NoError(t, err)
	return o
}

func TestForgetWithYesDeletesTheDoneMarkerSoTheJobRunsAgain(t *testing.T) {
	e := newReleaseEnv(t, core.Config{})
	require.Equal(t, core.Ran, runJob(t, e.guard, "job-1"))
	require.Equal(t, core.Duplicate, runJob(t, e.guard, "job-1"))

	r := runCLI(t, nil, nil, e.args("forget", "job-1", "-yes")...)
	require.Zero(t, r.status, "%s", r)
	require.Contains(t, r.stdout, "state: done (kept for ")
	require.Contains(t, r.stdout, "forget deletes this done marker")
	require.NotContains(t, r.stdout, "delete? [y/N]", "-yes does not ask")
	require.Contains(t, r.stdout, "deleted: the next copy of the job runs")
	require.Equal(t, driver.State(0), e.inspect(t, "job-1").State)
	require.Equal(t, core.Ran, runJob(t, e.guard, "job-1"))
}

func TestForgetAsksAndDeletesOnlyOnYes(t *testing.T) {
	e := newReleaseEnv(t, core.Config{})
	require.Equal(t, core.Ran, runJob(t, e.guard, "job-1"))
	for answer, said := range map[string]string{"n\n": "n", "\n": "", "": "", "nope\n": "nope", "yes please\n": "yes please"} {
		r := runCLI(t, strings.NewReader(answer), nil, e.args("forget", "job-1")...)
		requireOneErrorLine(t, r, `forget: not confirmed (answered "`+said+`"; -yes deletes without asking); nothing deleted`)
		require.Contains(t, r.stdout, "delete? [y/N] \n", "%q: %s", answer, r)
		require.Equal(t, driver.StateDone, e.inspect(t, "job-1").State, "%q", answer)
	}
	require.Equal(t, core.Duplicate, runJob(t, e.guard, "job-1"))

	for _, answer := range []string{"y\n", "YES\n"} {
		r := runCLI(t, strings.NewReader(answer), nil, e.args("forget", "job-1")...)
		require.Zero(t, r.status, "%q: %s", answer, r)
		require.Contains(t, r.stdout, "deleted")
		require.Equal(t, core.Ran, runJob(t, e.guard, "job-1"), "%q", answer)
	}
}

func TestForgetRefusesARunningClaim(t *testing.T) {
	e := newReleaseEnv(t, core.Config{Lease: time.Minute})
	stop := make(chan struct{})
	started, done := holdJob(t, e.guard, "job-1", stop)
	jobCtx := <-started
	before := e.inspect(t, "job-1")

	r := runCLI(t, nil, nil, e.args("forget", "-yes", "job-1")...)
	requireOneErrorLine(t, r, "forget: the key holds a running claim, not a done marker (release ends a claim); nothing deleted")
	e.requireHeld(t, "job-1", before, jobCtx)
	close(stop)
	require.Equal(t, core.Ran, <-done)
}

// While forget asks, the marker it showed expires and another copy claims
// the key: the answer "y" deletes nothing, and the claim is kept.
func TestForgetKeepsAClaimTakenWhileItAsks(t *testing.T) {
	e := newReleaseEnv(t, core.Config{Lease: time.Minute})
	require.Equal(t, core.Ran, runJob(t, e.guard, "job-1"))
	stored, err := e.guard.StoredKey("job-1")
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, commandPath, e.args("forget", "job-1")...)
	cmd.Env = commandEnv()
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, errOut := newSignalWriter("delete? [y/N]"), newSignalWriter("\n")
	cmd.Stdout, cmd.Stderr = out, errOut
	require.NoError(t, cmd.Start())
	out.wait(t)

	require.NoError(t, e.client.Del(ctx, stored).Err())
	stop := make(chan struct{})
	started, done := holdJob(t, e.guard, "job-1", stop)
	jobCtx := <-started
	before := e.inspect(t, "job-1")

	_, err = stdin.Write([]byte("y\n"))
	require.NoError(t, err)
	var exit *exec.ExitError
	require.True(t, errors.As(cmd.Wait(), &exit), "stdout:\n%s", out.String())
	require.Equal(t, 1, exit.ExitCode())
	require.Equal(t, "jobonce: forget: the key changed since it was shown (it now holds a running claim); nothing deleted\n", errOut.String())
	e.requireHeld(t, "job-1", before, jobCtx)
	close(stop)
	require.Equal(t, core.Ran, <-done)
}

// The check-and-delete compares the whole marker: one written by another
// claim since is kept.
func TestForgetKeepsADoneMarkerWrittenSinceItWasRead(t *testing.T) {
	e := newReleaseEnv(t, core.Config{})
	require.Equal(t, core.Ran, runJob(t, e.guard, "job-1"))
	stored, err := e.guard.StoredKey("job-1")
	require.NoError(t, err)
	keys := &redisKeys{client: e.client, store: e.store}
	ctx := context.Background()
	shown, err := keys.inspect(ctx, stored)
	require.NoError(t, err)
	require.Equal(t, driver.StateDone, shown.State)

	require.NoError(t, e.client.Del(ctx, stored).Err())
	require.Equal(t, core.Ran, runJob(t, e.guard, "job-1"))
	deleted, err := keys.forget(ctx, stored, shown)
	require.NoError(t, err)
	require.False(t, deleted)
	require.Equal(t, driver.StateDone, e.inspect(t, "job-1").State, "the newer marker is kept")

	now, err := keys.inspect(ctx, stored)
	require.NoError(t, err)
	deleted, err = keys.forget(ctx, stored, now)
	require.NoError(t, err)
	require.True(t, deleted)
	require.Equal(t, driver.State(0), e.inspect(t, "job-1").State)
}
