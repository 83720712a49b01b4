package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

func TestInspectAndRelease(t *testing.T) {
	prefix := testenv.Prefix(t)
	client := testenv.Redis(t, prefix)
	store, err := redisstore.New(client, nil)
	require.NoError(t, err)
	g, err := core.New(store, &core.Config{KeyPrefix: prefix, Lease: time.Minute})
	require.NoError(t, err)
	ctx := context.Background()
	args := func(a ...string) []string {
		return append([]string{"-redis", testenv.RedisURL(), "-prefix", prefix}, a...)
	}

	var out bytes.Buffer
	require.ErrorContains(t, run(ctx, args("inspect", "job-1"), nil, &out), "inspect: nothing is stored under the key")
	require.Contains(t, out.String(), "absent")

	started, stop := make(chan struct{}), make(chan struct{})
	done := make(chan core.Outcome, 1)
	go func() {
		o, _ := g.Do(ctx, "job-1", func(context.Context) error { close(started); <-stop; return nil })
		done <- o
	}()
	<-started
	out.Reset()
	require.NoError(t, run(ctx, args("inspect", "job-1"), nil, &out))
	require.Contains(t, out.String(), "running")
	out.Reset()
	require.NoError(t, run(ctx, args("-force", "-watch", "100ms", "release", "job-1"), nil, &out))
	require.Contains(t, out.String(), "released although")
	ran := false
	o, err := g.Do(ctx, "job-1", func(context.Context) error { ran = true; return nil })
	require.NoError(t, err)
	require.Equal(t, core.Ran, o, "a released claim lets the next copy run")
	require.True(t, ran)
	close(stop)
	require.Equal(t, core.LeaseLost, <-done, "the released holder learns it lost its claim")

	out.Reset()
	require.NoError(t, run(ctx, args("inspect", "job-1"), nil, &out))
	require.Contains(t, out.String(), "done")
	require.ErrorContains(t, run(ctx, args("release", "job-1"), nil, &out), "no running claim")

	require.Error(t, run(ctx, args("bogus"), nil, &out))
	require.Error(t, run(ctx, args("inspect", ""), nil, &out))
}

func TestCheck(t *testing.T) {
	testenv.Redis(t, "")
	ctx := context.Background()
	check := func(flags ...string) (string, error) {
		var out bytes.Buffer
		err := run(ctx, append(append([]string{"-redis", testenv.RedisURL()}, flags...), "check"), nil, &out)
		return out.String(), err
	}

	// scripts/test.sh starts the test Redis with --save '' --appendonly no
	// and no replica.
	out, err := check()
	require.ErrorIs(t, err, errRisk, "-fail-on all is the default")
	require.ErrorContains(t, err, "persistence")
	for _, want := range []string{"maxmemory-policy: ", "persistence: appendonly false", "role master",
		"0 connected replicas", "RISK: persistence: ", "RISK: replication: "} {
		require.Contains(t, out, want)
	}

	out, err = check("-fail-on", "eviction")
	require.NoError(t, err, "no allkeys-* policy on the test Redis")
	require.Contains(t, out, "RISK: persistence: ", "risks are printed even when they do not fail the check")
	_, err = check("-fail-on", "none")
	require.NoError(t, err)
	_, err = check("-fail-on", "eviction, persistence")
	require.ErrorIs(t, err, errRisk)
	require.NotContains(t, err.Error(), "replication", "only -fail-on kinds are named")
	_, err = check("-fail-on", "replication", "-max-lag", "1h")
	require.ErrorIs(t, err, errRisk, "a primary without replicas is a risk whatever the lag")

	_, err = check("-fail-on", "eviction,bogus")
	require.ErrorContains(t, err, `unknown risk kind "bogus"`)
	require.False(t, errors.Is(err, errRisk), "a bad flag is exit 1, not 2")
	_, err = check("-max-lag", "soon")
	require.ErrorContains(t, err, "-max-lag")
	require.False(t, errors.Is(err, errRisk))
}

func TestCheckUnreachable(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"-redis", "redis://127.0.0.1:1/0?dial_timeout=100ms&max_retries=-1", "check"}, nil, &out)
	require.ErrorContains(t, err, "jobonce: redisstore: INFO on 127.0.0.1:1")
	require.False(t, errors.Is(err, errRisk), "an unreachable Redis is exit 1, not 2")
}

func TestHelp(t *testing.T) {
	var out bytes.Buffer
	require.ErrorIs(t, run(context.Background(), []string{"-h", "check"}, nil, &out), flag.ErrHelp)
	require.Contains(t, out.String(), "-fail-on")
	require.Contains(t, out.String(), "-max-lag")
}

func TestHelpPrintsTheUsageAndExitsZero(t *testing.T) {
	const password = "s3cr3t-pw"
	for _, args := range [][]string{{"-h"}, {"-help"}, {"--help"}, {"release", "-h"}, {"release", "job-1", "-help"}} {
		stdout, stderr, status := runCommand(t, "redis://app:"+password+"@127.0.0.1:6379/0", args...)
		require.Zero(t, status, "%q: stdout:\n%s\nstderr:\n%s", args, stdout, stderr)
		require.Contains(t, stdout, "usage: jobonce", "%q", args)
		require.Contains(t, stdout, "$REDIS_URL", "%q", args)
		require.Empty(t, stderr, "%q", args)
		require.NotContains(t, stdout, password, "%q", args)
	}
}

func TestAnErrorIsOneLine(t *testing.T) {
	err := errors.Join(errors.New("failed to connect:\nfirst: refused"), errors.New("second:  refused"))
	require.Equal(t, "jobonce: failed to connect: first: refused; second: refused", errorLine(err))
	require.Equal(t, "jobonce: redisstore: down", errorLine(errors.New("jobonce: redisstore: down")))
}

func TestCheckFailsWhenItCouldNotReadTheSettings(t *testing.T) {
	// A server that refuses CONFIG GET (a managed Redis often does) with no
	// AOF: whether it keeps any done marker across a restart is unknown
	// (INFO still tells the eviction policy), and a check that cannot tell
	// must not pass.
	srv := testenv.StartRedisServer(t, "--rename-command", "CONFIG", "")
	var out bytes.Buffer
	err := run(context.Background(), []string{"-redis", "redis://" + srv.Addr + "/0", "-fail-on", "eviction,persistence", "check"}, nil, &out)
	require.ErrorIs(t, err, errRisk, out.String())
	require.Contains(t, out.String(), "maxmemory-policy: noeviction")
	require.Contains(t, out.String(), "RISK: persistence: RDB save settings unknown")
	require.NotContains(t, out.String(), "ok: done markers survive")
}
