package main

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// TestACommandGivenAClusterURLActsOnTheCluster: a -redis URL naming more
// nodes with addr parameters is a Redis Cluster: check reads it, list scans
// every primary, and inspect, forget and release act on the keys of any
// slot.
func TestACommandGivenAClusterURLActsOnTheCluster(t *testing.T) {
	cluster := testenv.StartRedisCluster(t, 3, 0)
	addrs := cluster.Addrs()
	clusterURL := "redis://" + addrs[0] + "?addr=" + addrs[1] + "&addr=" + addrs[2]
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = client.Close() })
	store, err := redisstore.New(client, &redisstore.Config{SkipEvictionCheck: true})
	require.NoError(t, err)
	g, err := core.New(store, &core.Config{Logger: testenv.Quiet})
	require.NoError(t, err)
	const jobs = 20
	for i := range jobs {
		require.Equal(t, core.Ran, runJob(t, g, "job-"+strings.Repeat("x", i)))
	}
	stop := make(chan struct{})
	started, done := holdJob(t, g, "held", stop)
	<-started
	cli := func(args ...string) cliRun {
		return runCLI(t, nil, nil, append([]string{"-redis", clusterURL}, args...)...)
	}

	r := cli("check", "-fail-on", "none")
	require.Zero(t, r.status, "check reads every primary: %s", r)

	r = cli("list", "-done")
	require.Zero(t, r.status, "%s", r)
	require.Contains(t, r.stdout, "Redis Cluster at "+addrs[0]+", "+addrs[1]+", "+addrs[2]+`, keys under -prefix "jobonce:":`)
	require.Contains(t, r.stdout, "1 running claim, 0 held past -lease 30s; 20 done markers.\n")
	require.Contains(t, r.stdout, "Scanned the 3 primaries of the Cluster.")
	require.Len(t, listRows(r.stdout), jobs+1)
	require.Equal(t, storedFormOf(t, g, "held"), listRows(r.stdout)[0].stored)

	r = cli("inspect", "held")
	require.Zero(t, r.status, "%s", r)
	require.Contains(t, r.stdout, "state: running")

	r = cli("forget", "-yes", "job-xxx")
	require.Zero(t, r.status, "%s", r)
	require.Contains(t, r.stdout, "deleted")
	require.Equal(t, core.Ran, runJob(t, g, "job-xxx"), "a forgotten job runs again")

	r = cli("release", "-force", "-watch", "0", "held")
	require.Zero(t, r.status, "%s", r)
	require.Contains(t, r.stdout, "released although")
	close(stop)
	require.Equal(t, core.LeaseLost, <-done)

	r = cli("inspect", "held")
	requireOneErrorLine(t, r, "inspect: nothing is stored under the key")
	require.Contains(t, r.stdout, "in Redis Cluster at "+addrs[0])
	require.Contains(t, r.stdout, "the Guard uses another Redis (-redis, $REDIS_URL)")
}
