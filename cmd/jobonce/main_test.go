package main

import (
	"bytes"
	"context"
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
	require.NoError(t, run(ctx, args("inspect", "job-1"), &out))
	require.Contains(t, out.String(), "absent")

	started, stop := make(chan struct{}), make(chan struct{})
	done := make(chan core.Outcome, 1)
	go func() {
		o, _ := g.Do(ctx, "job-1", func(context.Context) error { close(started); <-stop; return nil })
		done <- o
	}()
	<-started
	out.Reset()
	require.NoError(t, run(ctx, args("inspect", "job-1"), &out))
	require.Contains(t, out.String(), "running")
	out.Reset()
	require.NoError(t, run(ctx, args("release", "job-1"), &out))
	require.Contains(t, out.String(), "released")
	ran := false
	o, err := g.Do(ctx, "job-1", func(context.Context) error { ran = true; return nil })
	require.NoError(t, err)
	require.Equal(t, core.Ran, o, "a released claim lets the next copy run")
	require.True(t, ran)
	close(stop)
	require.Equal(t, core.LeaseLost, <-done, "the released holder learns it lost its claim")

	out.Reset()
	require.NoError(t, run(ctx, args("inspect", "job-1"), &out))
	require.Contains(t, out.String(), "done")
	require.ErrorContains(t, run(ctx, args("release", "job-1"), &out), "no running claim")

	out.Reset()
	require.NoError(t, run(ctx, args("check"), &out))
	require.Contains(t, out.String(), "maxmemory-policy")
	require.Error(t, run(ctx, args("bogus"), &out))
	require.Error(t, run(ctx, args("inspect", ""), &out))
}
