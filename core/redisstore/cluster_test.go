package redisstore_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/storetest"
	"github.com/jobonce/jobonce/internal/testenv"
)

// startCluster starts three redis-server processes with cluster mode on
// loopback, joins them with redis-cli --cluster create, and stops them at
// the end of the test.
func startCluster(t *testing.T) []string {
	t.Helper()
	testenv.Short(t)
	server, err := exec.LookPath("redis-server")
	require.NoError(t, err, "redis-server is needed for the cluster test (scripts/test.sh installs it)")
	cli, err := exec.LookPath("redis-cli")
	require.NoError(t, err, "redis-cli is needed for the cluster test")
	dir := t.TempDir()
	var addrs []string
	for i := range 3 {
		port := freeClusterPort(t)
		addr := "127.0.0.1:" + strconv.Itoa(port)
		cmd := exec.Command(server, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", i)),
			"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", filepath.Join(dir, fmt.Sprintf("%d.log", i)))
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		require.Eventually(t, func() bool {
			c, err := net.Dial("tcp", addr)
			if err == nil {
				_ = c.Close()
			}
			return err == nil
		}, 10*time.Second, 20*time.Millisecond, "redis-server on %s did not start", addr)
		addrs = append(addrs, addr)
	}
	out, err := exec.Command(cli, append([]string{"--cluster", "create"}, append(addrs, "--cluster-yes")...)...).CombinedOutput()
	require.NoError(t, err, "redis-cli --cluster create: %s", out)
	for _, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr})
		require.Eventually(t, func() bool {
			info, err := c.ClusterInfo(context.Background()).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok")
		}, 20*time.Second, 50*time.Millisecond, "cluster did not become ok")
		_ = c.Close()
	}
	return addrs
}

// freeClusterPort returns a free port whose cluster bus port (+10000) is free too.
func freeClusterPort(t *testing.T) int {
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		if port+10000 > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		if err != nil {
			continue
		}
		_ = bus.Close()
		return port
	}
	t.Fatal("no free port pair for a cluster node")
	return 0
}

func TestCluster(t *testing.T) {
	addrs := startCluster(t)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = client.Close() })
	require.Eventually(t, func() bool { return client.Ping(context.Background()).Err() == nil }, 10*time.Second, 50*time.Millisecond)

	t.Run("Conformance", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) driver.Store { return newStore(t, client) })
	})

	t.Run("ManyKeysAcrossSlots", func(t *testing.T) {
		g, err := core.New(newStore(t, client), &core.Config{Logger: quiet, KeyPrefix: testenv.Prefix(t)})
		require.NoError(t, err)
		const keys, copies = 300, 4
		var runs [keys]atomic.Int32
		var wg sync.WaitGroup
		for c := range copies {
			wg.Go(func() {
				for i := range keys {
					k := (i + c*keys/copies) % keys
					for {
						_, err := g.Do(context.Background(), "k"+strconv.Itoa(k), func(context.Context) error {
							runs[k].Add(1)
							return nil
						})
						if err == nil {
							break
						}
						require.ErrorIs(t, err, core.ErrRunning)
					}
				}
			})
		}
		wg.Wait()
		for i := range keys {
			require.EqualValues(t, 1, runs[i].Load(), "key %d", i)
		}
		jobs := make([]core.Job, 10)
		for i := range jobs {
			jobs[i] = core.Job{Key: "batch-" + strconv.Itoa(i)}
		}
		claims := g.Claim(context.Background(), jobs...)
		for _, c := range claims {
			require.True(t, c.Runs())
			_, err := c.Work(context.Background(), func(context.Context) ([]byte, error) { return nil, nil })
			require.NoError(t, err)
		}
		for _, out := range g.Finish(context.Background(), claims...) {
			require.Equal(t, core.Ran, out, "a pipelined batch spanning cluster slots completes")
		}
	})
}
