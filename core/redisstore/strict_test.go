package redisstore_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/stall"
	"github.com/jobonce/jobonce/internal/testenv"
)

// strict returns a Store made with Config.Strict on client, or New's error.
func strict(client redis.UniversalClient) (*redisstore.Store, error) {
	return redisstore.New(client, &redisstore.Config{Logger: quiet, Strict: true})
}

// Under Strict, a server New cannot reach is New's error, not a warning:
// it wraps driver.ErrUnreachable and names the cause.
func TestStrictNewRefusesAServerItCannotReach(t *testing.T) {
	t.Parallel()
	start := time.Now()
	_, err := strict(startupClient(t, "127.0.0.1:1"))
	require.Less(t, time.Since(start), 10*time.Second, "New's check is bounded")
	require.ErrorIs(t, err, driver.ErrUnreachable)
	require.ErrorContains(t, err, "jobonce: redisstore: New: could not read the server's eviction policy and persistence, which Config.Strict needs")
	require.ErrorContains(t, err, "connection refused")
}

// Under Strict, a server New cannot reach through a client that retries its
// dials (go-redis's default) until New's 2s end is New's error too, naming
// the dial's cause rather than the deadline alone.
func TestStrictNewNamesTheCauseBehindAClientsRetries(t *testing.T) {
	t.Parallel()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	_, err := strict(client)
	require.ErrorIs(t, err, driver.ErrUnreachable)
	require.ErrorContains(t, err, "INFO on 127.0.0.1:1: ")
	require.ErrorContains(t, err, "dial tcp 127.0.0.1:1: connect: connection refused")
}

// Under Strict, a server that does not answer New's check within its 2s is
// New's error, with the timeout that ended the read.
func TestStrictNewRefusesAServerThatDoesNotAnswer(t *testing.T) {
	t.Parallel()
	server := testenv.StartRedisServer(t, "--appendonly", "yes")
	proxy := testenv.StartProxy(t, "127.0.0.1:0", server.Addr)
	proxy.LoseRequestOnce([]byte("maxmemory-policy")) // in the check's pipeline only
	stalls := stall.Bound(t)
	start := time.Now()
	_, err := strict(startupClient(t, proxy.Addr()))
	require.Less(t, time.Since(start), 10*time.Second, "New's check is bounded")
	require.True(t, proxy.Silenced(), "the check's request was lost")
	require.ErrorIs(t, err, driver.ErrUnreachable)
	require.Regexp(t, timedOut(stalls, start, "i/o timeout"), err.Error())
}

// Under Strict, a server that answers the check with an error (a refused
// password) is New's error, naming the answer without the password; it was
// reached, so the error is not driver.ErrUnreachable.
func TestStrictNewRefusesAServerThatRefusesTheCheck(t *testing.T) {
	t.Parallel()
	const password = "s3cret-pw"
	fake := startFake(t, &fakeRedis{auth: "-WRONGPASS password " + password + " refused\r\n"})
	client := redis.NewClient(&redis.Options{Addr: fake.Addr(), Password: password, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	_, err := strict(client)
	require.ErrorContains(t, err, "which Config.Strict needs: jobonce: redisstore: INFO on "+fake.Addr()+": WRONGPASS password xxxxx refused")
	require.NotContains(t, err.Error(), password)
	require.NotErrorIs(t, err, driver.ErrUnreachable)
}

// Under Strict, settings that can lose done markers are New's error, naming
// the server, each setting and what to use instead, and matching
// driver.ErrStoreRisk (core.ErrStoreRisk); a server that persists its
// writes under noeviction is accepted, with AOF or with RDB snapshots.
func TestStrictNewRefusesSettingsThatCanLoseDoneMarkers(t *testing.T) {
	t.Parallel()
	const (
		eviction    = "maxmemory-policy allkeys-lru: duplicates can run after memory pressure evicts done markers; use noeviction"
		persistence = "no AOF and no RDB save: duplicates can run after a restart, which forgets every done marker; use appendonly yes"
	)
	for _, tc := range []struct {
		name string
		args []string
		want string // after "at <addr>: "; "" when New accepts the server
	}{
		{"Eviction", []string{"--maxmemory-policy", "allkeys-lru", "--appendonly", "yes"}, eviction},
		{"NoPersistence", nil, persistence},
		{"Both", []string{"--maxmemory-policy", "allkeys-lru"}, eviction + "; and " + persistence},
		{"AOF", []string{"--appendonly", "yes"}, ""},
		{"RDB", []string{"--save", "3600 1"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			server := testenv.StartRedisServer(t, tc.args...)
			s, err := strict(startupClient(t, server.Addr))
			if tc.want == "" {
				require.NoError(t, err)
				require.NotNil(t, s)
				return
			}
			require.EqualError(t, err, "jobonce: redisstore: New: Config.Strict refuses Redis at "+server.Addr+": "+tc.want)
			require.ErrorIs(t, err, driver.ErrStoreRisk)
			require.ErrorIs(t, err, core.ErrStoreRisk)
			require.Nil(t, s)
		})
	}
}

// Without Strict, the same settings and an unreachable server are warnings,
// and New returns a Store.
func TestNewWithoutStrictWarnsOfWhatStrictRefuses(t *testing.T) {
	t.Parallel()
	server := testenv.StartRedisServer(t, "--maxmemory-policy", "allkeys-lru")
	var logs records
	_, err := redisstore.New(startupClient(t, server.Addr), &redisstore.Config{Logger: slog.New(&logs)})
	require.NoError(t, err)
	require.Equal(t, []string{"eviction", "persistence"}, logs.events())

	var unreached records
	_, err = redisstore.New(startupClient(t, "127.0.0.1:1"), &redisstore.Config{Logger: slog.New(&unreached)})
	require.NoError(t, err)
	requireCouldNotCheck(t, &unreached, "connection refused")
}

// A server that refuses CONFIG GET, as managed services do, and reports no
// policy in INFO, tells Strict of no risk: what it does not report is not
// refused (jobonce check reports it as a risk).
func TestStrictNewAcceptsAServerThatRefusesConfigGet(t *testing.T) {
	t.Parallel()
	fake := startFake(t, &fakeRedis{})
	_, err := strict(startupClient(t, fake.Addr()))
	require.NoError(t, err)
	require.NotZero(t, fake.infos.Load(), "the check read INFO")
}

// Under Strict, each primary of a Cluster is checked, and the error names
// the one whose settings can lose done markers.
func TestStrictNewNamesTheClusterPrimaryAtRisk(t *testing.T) {
	t.Parallel()
	cluster := testenv.StartRedisCluster(t, 3, 0, "--appendonly", "yes")
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	_, err := strict(client)
	require.NoError(t, err, "every primary persists under noeviction")

	risky := cluster.Nodes[1]
	require.NoError(t, risky.Client().ConfigSet(context.Background(), "maxmemory-policy", "volatile-ttl").Err())
	_, err = strict(client)
	require.EqualError(t, err, "jobonce: redisstore: New: Config.Strict refuses Redis at "+risky.Addr+
		": maxmemory-policy volatile-ttl: duplicates can run after memory pressure evicts done markers; use noeviction")
}

// Under Strict, a replica is New's error: every claim on it fails
// (READONLY), or, on a writable replica, is lost at its next sync with its
// primary. Its primary is accepted.
func TestStrictNewRefusesAReplica(t *testing.T) {
	t.Parallel()
	primary, replicas := testenv.StartRedisReplicas(t, 1, "--appendonly", "yes")
	s, err := strict(startupClient(t, replicas[0].Addr))
	require.EqualError(t, err, "jobonce: redisstore: New: Config.Strict refuses Redis at "+replicas[0].Addr+
		": a replica (role slave): every claim fails (READONLY), or on a writable replica is lost at its next sync; give the primary's address")
	require.ErrorIs(t, err, core.ErrStoreRisk)
	require.Nil(t, s)
	_, err = strict(startupClient(t, primary.Addr))
	require.NoError(t, err)
}
