package main

import (
	"bytes"
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/pgtest"
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

// TestCheckFailsOnARedisThatRefusesEveryClaim: a read-only replica and a
// user without EVALSHA show settings that keep done markers, yet every
// claim a worker makes there fails; check says so and exits 1, as for a
// store it cannot use, while the primary passes and is left as it was.
func TestCheckFailsOnARedisThatRefusesEveryClaim(t *testing.T) {
	primary, replicas := testenv.StartRedisReplicas(t, 1, "--appendonly", "yes")
	ctx := context.Background()
	require.NoError(t, primary.Client().Do(ctx, "ACL", "SETUSER", "noscript", "on", ">pw", "~*", "&*", "+@all", "-evalsha", "-eval").Err())
	for name, c := range map[string]struct{ url, want string }{
		"replica":    {"redis://" + replicas[0].Addr, "READONLY"},
		"no EVALSHA": {"redis://noscript:pw@" + primary.Addr, "NOPERM"},
	} {
		r := runCLI(t, nil, nil, "check", "-redis", c.url, "-fail-on", "none")
		requireOneErrorLine(t, r, "check: a claim under \"jobonce:\" fails, as every worker's would")
		require.Contains(t, r.stderr, c.want, name)
		require.Contains(t, r.stdout, "claims: FAIL", name)
	}
	r := runCLI(t, nil, nil, "check", "-redis", "redis://"+primary.Addr, "-fail-on", "none", "-prefix", "app:")
	require.Zero(t, r.status, "%s", r)
	require.Contains(t, r.stdout, `claims: a claim and its release under "app:" succeed`)
	keys, err := primary.Client().Keys(ctx, "*").Result()
	require.NoError(t, err)
	require.Empty(t, keys)
}

// TestCheckFailsOnARoleThatMayOnlyReadTheTable: a role that may read the
// table, but not write it, passes every check of the table, yet every claim
// it makes fails; check says so and exits 1.
func TestCheckFailsOnARoleThatMayOnlyReadTheTable(t *testing.T) {
	e := newPgEnv(t, core.Config{})
	ctx := context.Background()
	role := "reader_" + strings.ToLower(e.schema)
	for _, sql := range []string{
		`CREATE ROLE ` + role + ` LOGIN`,
		`GRANT USAGE ON SCHEMA ` + e.schema + ` TO ` + role,
		`GRANT SELECT ON ALL TABLES IN SCHEMA ` + e.schema + ` TO ` + role,
	} {
		_, err := e.pool.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	t.Cleanup(func() {
		_, _ = e.pool.Exec(context.Background(), `DROP OWNED BY `+role)
		_, _ = e.pool.Exec(context.Background(), `DROP ROLE `+role)
	})
	u, err := url.Parse(pgtest.DatabaseURL())
	require.NoError(t, err)
	u.User = url.User(role)
	r := runCLI(t, nil, nil, "check", "-postgres", u.String(), "-schema", e.schema, "-fail-on", "none")
	requireOneErrorLine(t, r, `check: a claim under "jobonce:" fails, as every worker's would`)
	require.Contains(t, r.stderr, "permission denied")
	require.Contains(t, r.stdout, "claims: FAIL")

	r = e.run(t, "check", "-fail-on", "none")
	require.Zero(t, r.status, "%s", r)
	require.Contains(t, r.stdout, `claims: a claim and its release under "jobonce:" succeed`)
}
