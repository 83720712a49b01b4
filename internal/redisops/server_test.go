package redisops_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/internal/redisops"
	"github.com/jobonce/jobonce/internal/testenv"
)

func readOne(t *testing.T, client redis.UniversalClient) redisops.ServerInfo {
	t.Helper()
	infos, err := redisops.ReadServerInfo(context.Background(), client)
	require.NoError(t, err)
	require.Len(t, infos, 1)
	return infos[0]
}

func TestReadServerInfo(t *testing.T) {
	t.Parallel()
	client := testenv.Redis(t, "")
	info := readOne(t, client)
	require.Equal(t, client.Options().Addr, info.Addr)
	require.Len(t, info.RunID, 40)
	require.Equal(t, info.Uptime.Truncate(time.Second), info.Uptime, "uptime_in_seconds")
	require.Equal(t, "master", info.Role)
	require.Len(t, info.ReplID, 40)
	require.True(t, info.ConfigKnown)
	policy, err := client.ConfigGet(context.Background(), "maxmemory-policy").Result()
	require.NoError(t, err)
	require.Equal(t, policy["maxmemory-policy"], info.MaxmemoryPolicy)
	// scripts/test.sh starts the test Redis with --save '' --appendonly no.
	require.False(t, info.AppendOnly)
	require.False(t, info.SaveConfigured)
	require.Contains(t, kinds(info.Risks(time.Minute)), redisops.RiskPersistence)
}

func TestReadServerInfoPersistence(t *testing.T) {
	t.Parallel()
	client := testenv.StartRedisServer(t, "--appendonly", "yes", "--save", "3600 1", "--maxmemory-policy", "allkeys-lru").Client()
	info := readOne(t, client)
	require.True(t, info.ConfigKnown)
	require.True(t, info.AppendOnly)
	require.True(t, info.SaveConfigured)
	require.Equal(t, "allkeys-lru", info.MaxmemoryPolicy)
	require.Equal(t, []redisops.RiskKind{redisops.RiskEviction, redisops.RiskReplication}, kinds(info.Risks(time.Minute)))
}

func TestReadServerInfoConfigRefused(t *testing.T) {
	t.Parallel()
	client := testenv.StartRedisServer(t, "--maxmemory-policy", "volatile-lru", "--rename-command", "CONFIG", "").Client()
	require.Error(t, client.ConfigGet(context.Background(), "save").Err(), "CONFIG is disabled")
	info := readOne(t, client)
	require.False(t, info.ConfigKnown)
	require.Equal(t, "volatile-lru", info.MaxmemoryPolicy, "INFO memory still tells the policy")
	require.False(t, info.AppendOnly)
	require.NotContains(t, kinds(info.Risks(time.Minute)), redisops.RiskPersistence, "unknown persistence is not reported")
}

func TestReadServerInfoFailoverAddr(t *testing.T) {
	t.Parallel()
	addr := testenv.StartRedisServer(t).Addr
	// A failover client's Addr is "FailoverClient"; its dialer finds the primary.
	client := redis.NewClient(&redis.Options{Addr: "FailoverClient",
		Dialer: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		}})
	t.Cleanup(func() { _ = client.Close() })
	require.Equal(t, addr, readOne(t, client).Addr, "the address the server reports (CLIENT INFO laddr)")
}

func TestReadServerInfoRestart(t *testing.T) {
	t.Parallel()
	server := testenv.StartRedisServer(t)
	before := readOne(t, server.Client())
	server.Kill()
	server.Restart()
	after := readOne(t, server.Client())
	require.NotEqual(t, before.RunID, after.RunID, "run_id changes on every restart")
	require.Less(t, after.Uptime, time.Minute)
}

func TestReadServerInfoReplica(t *testing.T) {
	t.Parallel()
	primaryServer, replicas := testenv.StartRedisReplicas(t, 1)
	primary, replica := primaryServer.Client(), replicas[0].Client()
	var p, r redisops.ServerInfo
	require.Eventually(t, func() bool {
		p, r = readOne(t, primary), readOne(t, replica)
		return p.ConnectedReplicas == 1 && r.ReplID == p.ReplID
	}, 20*time.Second, 20*time.Millisecond, "the replica did not connect and sync (a synced replica shares its primary's replication ID)")
	require.Equal(t, "master", p.Role)
	require.Less(t, p.ReplicaLag, 10*time.Second)
	require.NotContains(t, kinds(p.Risks(10*time.Second)), redisops.RiskReplication)

	require.Equal(t, "slave", r.Role)
	require.Zero(t, r.ConnectedReplicas)

	// A stopped replica stops acknowledging: its lag grows each second.
	replicas[0].Pause()
	require.Eventually(t, func() bool {
		p = readOne(t, primary)
		return p.ReplicaLag >= 2*time.Second
	}, 20*time.Second, 50*time.Millisecond, "the stopped replica's lag did not grow")
	risks := p.Risks(time.Second)
	require.Contains(t, kinds(risks), redisops.RiskReplication)
	require.Contains(t, risks[len(risks)-1].Detail, "replica lag "+p.ReplicaLag.String())
	replicas[0].Resume()
	require.NotContains(t, kinds(r.Risks(10*time.Second)), redisops.RiskReplication, "a replica is not written to")

	require.NoError(t, replica.SlaveOf(context.Background(), "NO", "ONE").Err())
	promoted := readOne(t, replica)
	require.Equal(t, "master", promoted.Role)
	require.NotEqual(t, p.ReplID, promoted.ReplID, "promotion changes the replication ID")
}

func TestReadServerInfoCluster(t *testing.T) {
	addrs := testenv.StartRedisCluster(t, 3, 0).Addrs()
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = client.Close() })
	infos, err := redisops.ReadServerInfo(context.Background(), client)
	require.NoError(t, err)
	require.Len(t, infos, 3, "one ServerInfo per primary")
	var got []string
	for _, info := range infos {
		require.Equal(t, "master", info.Role)
		require.Len(t, info.RunID, 40)
		got = append(got, info.Addr)
	}
	require.ElementsMatch(t, addrs, got)
	require.IsIncreasing(t, got)
}

func TestReadServerInfoDown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = client.Close() })
	_, err = redisops.ReadServerInfo(context.Background(), client)
	require.ErrorContains(t, err, "jobonce: redisstore: INFO on "+addr)
}

func TestRisks(t *testing.T) {
	t.Parallel()
	safe := redisops.ServerInfo{Role: "master", ConnectedReplicas: 1, ReplicaLag: time.Second,
		MaxmemoryPolicy: "noeviction", AppendOnly: true, SaveConfigured: true, ConfigKnown: true}
	for _, tc := range []struct {
		name string
		edit func(*redisops.ServerInfo)
		want []redisops.RiskKind
	}{
		{"Safe", func(*redisops.ServerInfo) {}, nil},
		{"AllkeysLRU", func(i *redisops.ServerInfo) { i.MaxmemoryPolicy = "allkeys-lru" }, []redisops.RiskKind{redisops.RiskEviction}},
		{"AllkeysRandom", func(i *redisops.ServerInfo) { i.MaxmemoryPolicy = "allkeys-random" }, []redisops.RiskKind{redisops.RiskEviction}},
		{"VolatileLRU", func(i *redisops.ServerInfo) { i.MaxmemoryPolicy = "volatile-lru" }, []redisops.RiskKind{redisops.RiskEviction}},
		{"NoEviction", func(i *redisops.ServerInfo) { i.MaxmemoryPolicy = "noeviction" }, nil},
		{"OnlyRDB", func(i *redisops.ServerInfo) { i.AppendOnly = false }, nil},
		{"OnlyAOF", func(i *redisops.ServerInfo) { i.SaveConfigured = false }, nil},
		{"NoPersistence", func(i *redisops.ServerInfo) { i.AppendOnly, i.SaveConfigured = false, false },
			[]redisops.RiskKind{redisops.RiskPersistence}},
		{"PersistenceUnknown", func(i *redisops.ServerInfo) { i.AppendOnly, i.SaveConfigured, i.ConfigKnown = false, false, false }, nil},
		{"NoReplica", func(i *redisops.ServerInfo) { i.ConnectedReplicas, i.ReplicaLag = 0, 0 },
			[]redisops.RiskKind{redisops.RiskReplication}},
		{"LagAtLimit", func(i *redisops.ServerInfo) { i.ReplicaLag = 10 * time.Second }, nil},
		{"LagAboveLimit", func(i *redisops.ServerInfo) { i.ReplicaLag = 11 * time.Second },
			[]redisops.RiskKind{redisops.RiskReplication}},
		{"Replica", func(i *redisops.ServerInfo) { i.Role, i.ConnectedReplicas = "slave", 0 }, nil},
		{"All", func(i *redisops.ServerInfo) {
			*i = redisops.ServerInfo{Role: "master", MaxmemoryPolicy: "allkeys-lfu", ConfigKnown: true}
		}, []redisops.RiskKind{redisops.RiskEviction, redisops.RiskPersistence, redisops.RiskReplication}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info := safe
			tc.edit(&info)
			risks := info.Risks(10 * time.Second)
			require.Equal(t, tc.want, kinds(risks))
			for _, r := range risks {
				require.Contains(t, r.Detail, "duplicates can run after")
			}
		})
	}
}

func TestRisksDetail(t *testing.T) {
	t.Parallel()
	info := redisops.ServerInfo{Role: "master", ConnectedReplicas: 2, ReplicaLag: 30 * time.Second,
		MaxmemoryPolicy: "allkeys-lru", AppendOnly: true, ConfigKnown: true}
	risks := info.Risks(10 * time.Second)
	require.Len(t, risks, 2)
	require.Contains(t, risks[0].Detail, "allkeys-lru")
	require.Contains(t, risks[1].Detail, "30s")
	require.Contains(t, risks[1].Detail, "10s")
}

func kinds(risks []redisops.Risk) []redisops.RiskKind {
	var ks []redisops.RiskKind
	for _, r := range risks {
		ks = append(ks, r.Kind)
	}
	return ks
}

// A server that refuses the connection's AUTH answers no command: the read
// fails with the reason rather than passing with an empty picture.
func TestReadServerInfoWrongPasswordFails(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedisServer(t)
	require.NoError(t, srv.Client().ConfigSet(context.Background(), "requirepass", "right-password").Err())
	client := redis.NewClient(&redis.Options{Addr: srv.Client().Options().Addr, Password: "wrong-password", MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	_, err := redisops.ReadServerInfo(context.Background(), client)
	require.ErrorContains(t, err, "jobonce: redisstore: INFO on ")
	require.ErrorContains(t, err, "WRONGPASS")
}
