package main

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
)

func TestAStoredFormReadsBackAsTheStoredKey(t *testing.T) {
	n := newKeyNamer("", false)
	for _, key := range []string{"job-1", "it's \"$HOME\" `x` \\", "\x00\xff", strings.Repeat("k", 300)} {
		for _, plain := range []bool{false, true} {
			stored, err := n.derive(key, plain)
			require.NoError(t, err)
			form := storedForm(stored)
			require.Regexp(t, `^0x[0-9a-f]+$`, form, "only characters a shell passes on as they are")
			got, ok := parseStoredForm(form)
			require.True(t, ok)
			require.Equal(t, stored, got)
			got, ok = parseStoredForm(`\x` + form[2:])
			require.True(t, ok, "psql's bytea form")
			require.Equal(t, stored, got)

			l, err := n.resolve(form)
			require.NoError(t, err)
			require.True(t, l.asStored)
			require.Equal(t, stored, l.stored)
		}
	}
	for _, s := range []string{"0x", "0x1", "0xzz", "x0102", "job-1"} {
		_, ok := parseStoredForm(s)
		require.False(t, ok, s)
	}
}

func TestAKeyThatLooksHexButLacksThePrefixIsTheApplicationsKey(t *testing.T) {
	n := newKeyNamer("app:", false)
	l, err := n.resolve("0xdeadbeef")
	require.NoError(t, err)
	require.False(t, l.asStored)
	want, err := n.derive("0xdeadbeef", false)
	require.NoError(t, err)
	require.Equal(t, want, l.stored)

	_, err = n.resolve("")
	require.ErrorIs(t, err, core.ErrInvalidKey)
}

var storedKeyLine = regexp.MustCompile(`stored key: (0x[0-9a-f]+) \(reads `)

// printedStoredKey returns the stored key out printed, in its printed form.
func printedStoredKey(t *testing.T, out string) string {
	t.Helper()
	m := storedKeyLine.FindStringSubmatch(out)
	require.NotNil(t, m, "no stored key in:\n%s", out)
	return m[1]
}

func TestEveryCommandTakesTheStoredKeyInspectPrints(t *testing.T) {
	e := newReleaseEnv(t, core.Config{})
	ctx := context.Background()
	o, err := e.guard.Do(ctx, "job-1", func(context.Context) error { return nil })
	require.NoError(t, err)
	require.Equal(t, core.Ran, o)
	stored, err := e.guard.StoredKey("job-1")
	require.NoError(t, err)
	require.True(t, strings.ContainsAny(stored[len(e.prefix):], "!\"#$%&'()*+,-./:;<=>?@[\\]^_`"),
		"a hashed key holds characters a shell reads: %q", stored)

	r := runCLI(t, nil, nil, e.args("inspect", "job-1")...)
	require.Zero(t, r.status, "%s", r)
	form := printedStoredKey(t, r.stdout)
	require.Equal(t, storedForm(stored), form)
	require.Contains(t, r.stdout, "state: done")

	for _, key := range []string{form, `\x` + form[2:]} {
		r = runCLI(t, nil, nil, e.args("inspect", key)...)
		require.Zero(t, r.status, "%s", r)
		require.Equal(t, form, printedStoredKey(t, r.stdout))
		require.Contains(t, r.stdout, "state: done", "%s", r)
	}
	r = runCLI(t, nil, nil, e.args("release", form)...)
	requireOneErrorLine(t, r, "no running claim but a done marker")
	r = runCLI(t, nil, nil, e.args("forget", "-yes", form)...)
	require.Zero(t, r.status, "%s", r)
	require.Contains(t, r.stdout, "deleted")
	o, err = e.guard.Do(ctx, "job-1", func(context.Context) error { return nil })
	require.NoError(t, err)
	require.Equal(t, core.Ran, o, "forget took the stored key")
}
