package main

import (
	"bytes"
	"context"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/internal/testenv"
)

// TestCheckSaysWhetherTheUserMayUseTheSignalsChannels: check says whether
// the user may use the channels under -prefix, those of the completion
// signal, and names the ACL when it may not, without failing for it.
func TestCheckSaysWhetherTheUserMayUseTheSignalsChannels(t *testing.T) {
	admin := testenv.Redis(t, "")
	ctx := context.Background()
	check := func(redisURL string) string {
		var out bytes.Buffer
		require.NoError(t, run(ctx, []string{"-redis", redisURL, "-prefix", "app:", "-fail-on", "none", "check"}, nil, &out))
		return out.String()
	}
	require.Contains(t, check(testenv.RedisURL()), `completion signal: the user may use the channels under "app:"`)

	user, password := "jobonce-test-"+testenv.RandomID(4), testenv.RandomID(8)
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", user, "reset", "on", ">"+password, "~*", "resetchannels", "+@all").Err())
	t.Cleanup(func() { _ = admin.Do(context.Background(), "ACL", "DELUSER", user).Err() })
	u, err := url.Parse(testenv.RedisURL())
	require.NoError(t, err)
	u.User = url.UserPassword(user, password)
	out := check(u.String())
	require.Contains(t, out, `completion signal: NOTE: the user may not use the channels under "app:"`)
	require.Contains(t, out, "grant ACL &app:* or allchannels")
}

// TestCheckRefusesANegativeMaxLag: a negative -max-lag, under which every
// replica would lag too much, is an error naming it, before any store is
// read.
func TestCheckRefusesANegativeMaxLag(t *testing.T) {
	r := runCLI(t, nil, nil, "check", "-redis", "redis://127.0.0.1:1", "-max-lag", "-1s")
	requireOneErrorLine(t, r, "jobonce: -max-lag: -1s is negative")
}
