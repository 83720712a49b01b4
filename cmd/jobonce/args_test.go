package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/internal/testenv"
)

func TestFlagsMayComeBeforeOrAfterTheCommandAndTheKey(t *testing.T) {
	e := newReleaseEnv(t, core.Config{Lease: time.Minute})
	stored, err := e.guard.StoredKey("job-1")
	require.NoError(t, err)
	for _, args := range [][]string{
		{"-force", "-watch", "50ms", "release", "job-1"},
		{"release", "-force", "-watch", "50ms", "job-1"},
		{"release", "job-1", "-force", "-watch", "50ms"},
		{"release", "-watch=50ms", "job-1", "--force"},
	} {
		_, err := e.store.Claim(context.Background(), driver.ClaimRequest{Key: stored, Token: driver.Token{1}, Lease: time.Minute})
		require.NoError(t, err)
		out, err := e.run(t, args...)
		require.NoError(t, err, "%q: output:\n%s", args, out)
		require.Contains(t, out, "watching the lease for up to 50ms", "%q", args)
		require.Contains(t, out, "released although", "%q", args)
		require.Equal(t, driver.State(0), e.inspect(t, "job-1").State, "%q", args)
	}

	_, err = e.store.Claim(context.Background(), driver.ClaimRequest{Key: stored, Token: driver.Token{2}, Lease: time.Minute})
	require.NoError(t, err)
	out, err := e.run(t, "release", "job-1", "-watch", "50ms")
	require.ErrorContains(t, err, "refused: no renewal seen in", "without -force after KEY it refuses; output:\n%s", out)
	require.Contains(t, out, "watching the lease for up to 50ms")
	require.Equal(t, driver.StateRunning, e.inspect(t, "job-1").State)

	var buf bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"inspect", "job-1", "-prefix", e.prefix, "-redis", testenv.RedisURL()}, nil, &buf))
	require.Contains(t, buf.String(), "running", "-prefix after KEY names the Guard's keys")

	buf.Reset()
	require.NoError(t, run(context.Background(), []string{"check", "-fail-on", "none", "-redis", testenv.RedisURL()}, nil, &buf), "-fail-on after check applies to it")
}

func TestNoArgumentAfterTwoDashesIsAFlag(t *testing.T) {
	e := newReleaseEnv(t, core.Config{})
	stored, err := e.guard.StoredKey("-job-1")
	require.NoError(t, err)
	out, err := e.run(t, "inspect", "--", "-job-1")
	require.ErrorContains(t, err, "inspect: nothing is stored under the key", "output:\n%s", out)
	require.Contains(t, out, "stored key: "+storedForm(stored))
}

func TestAnUnknownFlagIsNamedWhereverItStands(t *testing.T) {
	for _, args := range [][]string{
		{"-nosuchflag", "release", "job-1"},
		{"release", "-nosuchflag", "job-1"},
		{"release", "job-1", "-nosuchflag"},
	} {
		var out bytes.Buffer
		err := run(context.Background(), append([]string{"-redis", testenv.RedisURL()}, args...), nil, &out)
		require.ErrorContains(t, err, "flag provided but not defined: -nosuchflag", "%q", args)
		require.Contains(t, out.String(), "usage: jobonce", "%q", args)
	}
	_, stderr, status := runCommand(t, testenv.RedisURL(), "release", "job-1", "-nosuchflag")
	require.Equal(t, 1, status)
	require.Contains(t, stderr, "jobonce: flag provided but not defined: -nosuchflag")
}
