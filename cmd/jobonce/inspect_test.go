package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
)

// storedKeyOf returns the key a Guard under prefix stores key under.
func storedKeyOf(t *testing.T, prefix, key string, plain bool) string {
	t.Helper()
	n := newKeyNamer(prefix, plain)
	stored, err := n.derive(key, plain)
	require.NoError(t, err)
	return stored
}

func TestAnAbsentKeyFoundUnderTheOtherFormSaysWhichFlag(t *testing.T) {
	e := newReleaseEnv(t, core.Config{PlainKeys: true})
	_, err := e.guard.Do(context.Background(), "job-1", func(context.Context) error { return nil })
	require.NoError(t, err)
	hashed, plain := storedKeyOf(t, e.prefix, "job-1", false), storedKeyOf(t, e.prefix, "job-1", true)

	r := runCLI(t, nil, nil, e.args("inspect", "job-1")...)
	requireOneErrorLine(t, r, "inspect: nothing is stored under the key")
	require.Contains(t, r.stdout, "state: absent")
	require.Contains(t, r.stdout, `looked up: KEY "job-1", hashed, under -prefix "`+e.prefix+`", stored key `+storedForm(hashed)+", in Redis database 0 at 127.0.0.1:")
	require.Contains(t, r.stdout, "hint: found under -plain: the Guard stores keys plain (Config.PlainKeys): pass -plain: stored key "+storedForm(plain)+" holds a done marker")

	for _, cmd := range []string{"release", "forget"} {
		r = runCLI(t, nil, nil, e.args(cmd, "job-1")...)
		requireOneErrorLine(t, r, cmd+": nothing is stored under the key")
		require.Contains(t, r.stdout, "hint: found under -plain", "%s: %s", cmd, r)
	}
	r = runCLI(t, nil, nil, e.args("inspect", "-plain", "job-1")...)
	require.Zero(t, r.status, "%s", r)
	require.Contains(t, r.stdout, "state: done")
	require.NotContains(t, r.stdout, "hint")

	// The other way round: a Guard that hashes, looked up with -plain.
	h := newReleaseEnv(t, core.Config{})
	stop := make(chan struct{})
	started, done := holdJob(t, h.guard, "job-2", stop)
	<-started
	r = runCLI(t, nil, nil, h.args("inspect", "-plain", "job-2")...)
	requireOneErrorLine(t, r, "inspect: nothing is stored under the key")
	require.Contains(t, r.stdout, "hint: found hashed: the Guard hashes keys (Config.PlainKeys unset): drop -plain: stored key "+storedForm(storedKeyOf(t, h.prefix, "job-2", false))+" holds a running claim")
	close(stop)
	require.Equal(t, core.Ran, <-done)
}

func TestAnAbsentStoredKeyPassedAsKEYIsFound(t *testing.T) {
	e := newReleaseEnv(t, core.Config{})
	_, err := e.guard.Do(context.Background(), "job-1", func(context.Context) error { return nil })
	require.NoError(t, err)
	stored, err := e.guard.StoredKey("job-1")
	require.NoError(t, err)

	r := runCLI(t, nil, nil, e.args("inspect", "--", stored)...)
	requireOneErrorLine(t, r, "inspect: nothing is stored under the key")
	require.Contains(t, r.stdout, "hint: KEY is itself a stored key: pass it as "+storedForm(stored)+": stored key "+storedForm(stored)+" holds a done marker")

	other := newReleaseEnv(t, core.Config{})
	r = runCLI(t, nil, nil, other.args("inspect", storedForm(stored))...)
	requireOneErrorLine(t, r, "inspect: nothing is stored under the key")
	require.Contains(t, r.stdout, `hint: KEY is a stored key outside -prefix "`+other.prefix+`": give the Guard's -prefix: stored key `+storedForm(stored)+" holds a done marker")
}

func TestAnAbsentKeyFoundNowhereNamesTheLikelyCauses(t *testing.T) {
	e := newReleaseEnv(t, core.Config{})
	for _, cmd := range []string{"inspect", "release", "forget"} {
		r := runCLI(t, nil, nil, e.args(cmd, "job-1")...)
		requireOneErrorLine(t, r, cmd+": nothing is stored under the key")
		require.Contains(t, r.stdout, "state: absent")
		require.Contains(t, r.stdout, `looked up: KEY "job-1", hashed, under -prefix "`+e.prefix+`", stored key `+storedForm(storedKeyOf(t, e.prefix, "job-1", false)))
		require.Contains(t, r.stdout, "hint: nothing under the key's other forms either; likely:\n"+
			`  - -prefix "`+e.prefix+`" or -plain=false do not match the Guard's Config.KeyPrefix and Config.PlainKeys;`+"\n"+
			"  - the Guard uses another Redis or database number (-redis, $REDIS_URL: redis://host:port/N);\n"+
			"  - or the key's done marker outlived the Guard's Config.Retention and expired.\n", "%s: %s", cmd, r)
	}
	r := runCLI(t, nil, nil, e.args("inspect", storedForm(e.prefix+"gone"))...)
	requireOneErrorLine(t, r, "inspect: nothing is stored under the key")
	require.Contains(t, r.stdout, "looked up: KEY as a stored key, stored key "+storedForm(e.prefix+"gone"))
	require.Contains(t, r.stdout, "hint: nothing is stored there; likely:\n  - the Guard uses another Redis or database number")
}
