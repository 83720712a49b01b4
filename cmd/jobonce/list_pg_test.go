package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
)

// TestPostgresListShowsTheRunningClaimsOldestFirstAndThoseHeldPastTheLease:
// on PostgreSQL, list prints the live claims under -prefix oldest first,
// marks the one held longer than -lease, lists done rows with -done, leaves
// out another prefix's rows and expired claims, and stops at -scan rows.
func TestPostgresListShowsTheRunningClaimsOldestFirstAndThoseHeldPastTheLease(t *testing.T) {
	e := newPgEnv(t, core.Config{Lease: time.Minute})
	ctx := context.Background()
	old, fresh := driver.NewToken(), driver.NewToken()
	for key, token := range map[string]driver.Token{"job-old": old, "job-fresh": fresh, "job-lapsed": driver.NewToken()} {
		stored, err := e.guard.StoredKey(key)
		require.NoError(t, err)
		reply, err := e.store.Claim(ctx, driver.ClaimRequest{Key: stored, Token: token, Lease: 50 * time.Second})
		require.NoError(t, err)
		require.Equal(t, driver.StateClaimed, reply.State)
	}
	stored, err := e.guard.StoredKey("job-old")
	require.NoError(t, err)
	_, err = e.pool.Exec(ctx, "UPDATE jobonce_keys SET fence = fence - 600000000 WHERE key = $1", []byte(stored)) // held for ten minutes
	require.NoError(t, err)
	e.expire(t, "job-lapsed")
	require.Equal(t, core.Ran, runJob(t, e.guard, "job-done"))
	otherPrefix, err := core.New(e.store, &core.Config{KeyPrefix: "other:"})
	require.NoError(t, err)
	stop := make(chan struct{})
	started, done := holdJob(t, otherPrefix, "job-elsewhere", stop)
	<-started
	defer func() { close(stop); <-done }()

	r := e.run(t, "list", "-lease", "1m")
	require.Zero(t, r.status, "%s", r)
	require.Contains(t, r.stdout, `PostgreSQL table "`+e.schema+`"."jobonce_keys" in database test at 127.0.0.1:5432, keys under -prefix "jobonce:":`)
	rows := listRows(r.stdout)
	require.Len(t, rows, 2, "%s", r)
	require.Equal(t, listRow{state: "past-lease", age: rows[0].age, left: rows[0].left, holder: old.String()[:8], stored: storedFormOf(t, e.guard, "job-old")}, rows[0])
	require.Equal(t, listRow{state: "running", age: rows[1].age, left: rows[1].left, holder: fresh.String()[:8], stored: storedFormOf(t, e.guard, "job-fresh")}, rows[1])
	age, err := time.ParseDuration(rows[0].age)
	require.NoError(t, err)
	require.GreaterOrEqual(t, age, 10*time.Minute)
	require.Contains(t, r.stdout, "2 running claims, 1 held past -lease 1m0s.\n", "done rows are not read without -done")
	require.Contains(t, r.stdout, "1 other key under the prefix")
	require.Contains(t, r.stdout, "Read the 3 rows whose lease or retention ends within -lease 1m0s")

	r = e.run(t, "list", "-lease", "1m", "-done")
	require.Zero(t, r.status, "%s", r)
	rows = listRows(r.stdout)
	require.Len(t, rows, 3, "%s", r)
	require.Equal(t, "done", rows[2].state)
	require.Equal(t, storedFormOf(t, e.guard, "job-done"), rows[2].stored)
	require.True(t, strings.HasPrefix(rows[2].left, "23h59m"), "retention left: %s", rows[2].left)
	require.Contains(t, r.stdout, "2 running claims, 1 held past -lease 1m0s; 1 done marker.\n")

	r = e.run(t, "list", "-lease", "1m", "-scan", "1")
	require.Zero(t, r.status, "%s", r)
	require.Len(t, listRows(r.stdout), 1, "%s", r)
	require.Contains(t, r.stdout, "The read stopped at -scan 1 rows: claims with less lease left are not listed.")

	r = e.run(t, "inspect", rows[0].stored)
	require.Zero(t, r.status, "%s", r)
	require.Contains(t, r.stdout, "token "+old.String())
}
