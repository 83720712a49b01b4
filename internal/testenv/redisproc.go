package testenv

// Redis processes for failover tests: standalone servers, a primary with
// replicas, a Sentinel, and a Cluster with replicas, all on loopback, each
// started by the test and killed at its end (t.Cleanup). They need the
// redis-server and redis-cli binaries (Debian's redis-server and
// redis-tools packages; scripts/test.sh installs them); a Sentinel runs as
// redis-server --sentinel, so no separate redis-sentinel binary is needed.
// Every wait polls with a deadline.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// redisStartTimeout bounds the wait for a started process to answer PING.
	redisStartTimeout = 20 * time.Second
	// redisPoll is the interval of every poll below.
	redisPoll = 25 * time.Millisecond
)

// RedisServer is a redis-server process (or a Sentinel) on a loopback port
// of its own, with a directory of its own. It is killed at the end of the
// test, and when the test failed the end of its log is logged.
type RedisServer struct {
	// Addr is "127.0.0.1:port"; it stays the same across Restart.
	Addr string
	// Port is the port of Addr. For a Cluster node, Port+10000 is its bus.
	Port int
	// Dir holds the process's log (redis.log), and its data files when
	// persistence is turned on, or its nodes.conf or sentinel.conf.
	Dir string

	t      testing.TB
	bin    string
	argv   []string // the arguments of every start
	client *redis.Client

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd has exited
}

// StartRedisServer starts a standalone redis-server on a free loopback port
// with no persistence (save "", appendonly no) and no delay before a
// replica's full synchronization (repl-diskless-sync-delay 0), and waits until it answers
// PING. args are added to the command line and override those defaults
// ("--appendonly", "yes" turns the AOF on, "--replicaof", "127.0.0.1",
// "6380" makes a replica). It skips the test under -short.
func StartRedisServer(t testing.TB, args ...string) *RedisServer {
	t.Helper()
	return startRedis(t, func(port int, dir string) []string {
		return append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0", "--dir", dir,
			"--logfile", filepath.Join(dir, "redis.log")}, args...)
	})
}

// startRedis starts redis-server with the arguments argv gives for a free
// port (whose +10000 is free too, for a Cluster bus) and a new directory.
func startRedis(t testing.TB, argv func(port int, dir string) []string) *RedisServer {
	t.Helper()
	Short(t)
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is needed for this test (scripts/test.sh installs it): %v", err)
	}
	port := freePortPair(t)
	dir := t.TempDir()
	s := &RedisServer{
		Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Port: port, Dir: dir,
		t: t, bin: bin, argv: argv(port, dir),
	}
	s.client = redis.NewClient(&redis.Options{Addr: s.Addr, DialTimeout: time.Second,
		ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, PoolSize: 2, MaxRetries: -1})
	t.Cleanup(func() {
		_ = s.client.Close()
		s.Kill()
		if t.Failed() {
			t.Logf("last lines of the log of redis %s:\n%s", s.Addr, s.logTail(15))
		}
	})
	s.start(nil)
	return s
}

// freePortPair returns a free loopback port whose +10000 (a Cluster node's
// bus port) is free too.
func freePortPair(t testing.TB) int {
	t.Helper()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("listen: %v", err)
		}
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
	t.Fatal("no free loopback port pair for a redis-server")
	return 0
}

// start starts the process with its arguments and extra, and waits until it
// answers PING.
func (s *RedisServer) start(extra []string) {
	s.t.Helper()
	s.mu.Lock()
	if s.cmd != nil {
		s.mu.Unlock()
		s.t.Fatalf("redis %s: started while running", s.Addr)
	}
	cmd := exec.Command(s.bin, append(slices.Clone(s.argv), extra...)...)
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		s.t.Fatalf("start redis-server on %s: %v", s.Addr, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()

	deadline := time.Now().Add(redisStartTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := s.client.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		select {
		case <-exited:
			s.t.Fatalf("redis-server on %s exited at start: %s", s.Addr, s.logTail(10))
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server on %s does not answer after %s: %v", s.Addr, redisStartTimeout, err)
		}
		time.Sleep(redisPoll)
	}
}

// Kill kills the process with SIGKILL and waits until it has exited. It
// does nothing when the process is not running.
func (s *RedisServer) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd, s.exited = nil, nil
}

// Pause stops the process (SIGSTOP) until Resume: a replica paused so
// lags, and its primary's WAIT times out. The process is resumed at the end
// of the test if it still is paused.
func (s *RedisServer) Pause() {
	s.t.Helper()
	s.signal(syscall.SIGSTOP)
	s.t.Cleanup(s.Resume)
}

// Resume continues a paused process (SIGCONT).
func (s *RedisServer) Resume() { s.signal(syscall.SIGCONT) }

func (s *RedisServer) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// Running reports whether the process was started and not killed.
func (s *RedisServer) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Restart starts the killed process again on the same port, in the same
// directory, with the same arguments and extra added, and waits until it
// answers PING. Without persistence it starts empty; a Cluster node keeps
// its nodes.conf, and a Sentinel its sentinel.conf.
func (s *RedisServer) Restart(extra ...string) {
	s.t.Helper()
	s.start(extra)
}

// Client returns a client of this process for control commands (INFO,
// CLUSTER …), closed at the end of the test. It reconnects after a Restart.
func (s *RedisServer) Client() *redis.Client { return s.client }

// Info returns the fields of INFO section as a map.
func (s *RedisServer) Info(ctx context.Context, section string) (map[string]string, error) {
	info, err := s.client.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	return parseInfo(info), nil
}

func parseInfo(info string) map[string]string {
	m := make(map[string]string)
	for line := range strings.SplitSeq(info, "\r\n") {
		if name, value, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(name, "#") {
			m[name] = value
		}
	}
	return m
}

// WaitRole waits until INFO replication reports role ("master" or "slave").
func (s *RedisServer) WaitRole(t testing.TB, role string, within time.Duration) {
	t.Helper()
	var last map[string]string
	if !poll(within, func() bool {
		info, err := s.Info(context.Background(), "replication")
		last = info
		return err == nil && info["role"] == role
	}) {
		t.Fatalf("redis %s: role is not %s after %s (INFO replication %v)", s.Addr, role, within, last)
	}
}

// WaitReplicaOf waits until this process is a replica of primary (an
// address) whose link is up (INFO replication master_link_status:up), that
// is, its initial synchronization is done.
func (s *RedisServer) WaitReplicaOf(t testing.TB, primary string, within time.Duration) {
	t.Helper()
	var last map[string]string
	if !poll(within, func() bool {
		info, err := s.Info(context.Background(), "replication")
		last = info
		return err == nil && info["role"] == "slave" &&
			net.JoinHostPort(info["master_host"], info["master_port"]) == primary &&
			info["master_link_status"] == "up"
	}) {
		t.Fatalf("redis %s: not a linked replica of %s after %s (INFO replication %v)", s.Addr, primary, within, last)
	}
}

// logTail returns the last n lines of the process's log.
func (s *RedisServer) logTail(n int) string {
	b, err := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// poll calls cond every redisPoll until it returns true (then poll returns
// true) or within has passed (false).
func poll(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(redisPoll)
	}
}

// StartRedisReplicas starts a primary and n replicas of it (--replicaof),
// every one with args (see StartRedisServer), and waits until each
// replica's link to the primary is up.
func StartRedisReplicas(t testing.TB, n int, args ...string) (primary *RedisServer, replicas []*RedisServer) {
	t.Helper()
	primary = StartRedisServer(t, args...)
	for range n {
		r := StartRedisServer(t, append(slices.Clone(args), "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))...)
		replicas = append(replicas, r)
	}
	for _, r := range replicas {
		r.WaitReplicaOf(t, primary.Addr, redisStartTimeout)
	}
	return primary, replicas
}

// RedisSentinel is a Sentinel (redis-server --sentinel) monitoring one
// primary under MasterName, with quorum 1, down-after-milliseconds 500 and
// failover-timeout 3000: a SIGKILLed primary is replaced by a replica
// within a few seconds. A client of the monitored set:
//
//	redis.NewFailoverClient(&redis.FailoverOptions{
//		MasterName: s.MasterName, SentinelAddrs: []string{s.Addr}})
type RedisSentinel struct {
	*RedisServer
	MasterName string

	sentinel *redis.SentinelClient
}

// StartRedisSentinel starts a Sentinel monitoring primary and waits until it
// sees replicas healthy replicas of it, so that a failover can start at once.
func StartRedisSentinel(t testing.TB, primary *RedisServer, replicas int) *RedisSentinel {
	t.Helper()
	const name = "jobonce"
	srv := startRedis(t, func(port int, dir string) []string {
		conf := filepath.Join(dir, "sentinel.conf")
		text := fmt.Sprintf(`port %d
bind 127.0.0.1
dir %s
logfile %s
sentinel monitor %s 127.0.0.1 %d 1
sentinel down-after-milliseconds %[4]s 500
sentinel failover-timeout %[4]s 3000
sentinel parallel-syncs %[4]s 1
`, port, dir, filepath.Join(dir, "redis.log"), name, primary.Port)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatalf("write %s: %v", conf, err)
		}
		return []string{conf, "--sentinel"}
	})
	s := &RedisSentinel{RedisServer: srv, MasterName: name,
		sentinel: redis.NewSentinelClient(&redis.Options{Addr: srv.Addr, DialTimeout: time.Second})}
	t.Cleanup(func() { _ = s.sentinel.Close() })
	s.WaitReplicas(t, replicas, redisStartTimeout)
	return s
}

// Primary returns the address of the primary the Sentinel names now.
func (s *RedisSentinel) Primary(ctx context.Context) (string, error) {
	addr, err := s.sentinel.GetMasterAddrByName(ctx, s.MasterName).Result()
	if err != nil {
		return "", err
	}
	if len(addr) != 2 {
		return "", fmt.Errorf("sentinel get-master-addr-by-name: %q", addr)
	}
	return net.JoinHostPort(addr[0], addr[1]), nil
}

// WaitReplicas waits until the Sentinel sees at least n replicas of the
// current primary that are up and linked (flags "slave", master-link-status
// ok).
func (s *RedisSentinel) WaitReplicas(t testing.TB, n int, within time.Duration) {
	t.Helper()
	var last []map[string]string
	if !poll(within, func() bool {
		rs, err := s.sentinel.Replicas(context.Background(), s.MasterName).Result()
		last = rs
		ok := 0
		for _, r := range rs {
			if r["flags"] == "slave" && r["master-link-status"] == "ok" {
				ok++
			}
		}
		return err == nil && ok >= n
	}) {
		t.Fatalf("sentinel %s: fewer than %d healthy replicas after %s: %v", s.Addr, n, within, last)
	}
}

// WaitFailover waits until the Sentinel has finished a failover away from
// old: it names another primary, with no failover in progress and old
// listed among its replicas (+switch-master done), and that primary
// reports role master. It returns the new primary's address. Start old
// again only after this: while the Sentinel is still failing over, a
// primary that comes back can win its place back, empty.
func (s *RedisSentinel) WaitFailover(t testing.TB, old string, within time.Duration) string {
	t.Helper()
	var why string
	if !poll(within, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		m, err := s.sentinel.Master(ctx, s.MasterName).Result()
		if err != nil {
			why = err.Error()
			return false
		}
		addr := net.JoinHostPort(m["ip"], m["port"])
		if addr == old || m["flags"] != "master" {
			why = fmt.Sprintf("primary %s, flags %s", addr, m["flags"])
			return false
		}
		rs, err := s.sentinel.Replicas(ctx, s.MasterName).Result()
		if err != nil || !slices.ContainsFunc(rs, func(r map[string]string) bool {
			return net.JoinHostPort(r["ip"], r["port"]) == old
		}) {
			why = fmt.Sprintf("primary %s, %s not yet listed as its replica (%v)", addr, old, err)
			return false
		}
		c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, MaxRetries: -1})
		defer c.Close()
		info, err := c.Info(ctx, "replication").Result()
		if err != nil || parseInfo(info)["role"] != "master" {
			why = fmt.Sprintf("primary %s does not report role master (%v)", addr, err)
			return false
		}
		why = addr
		return true
	}) {
		t.Fatalf("sentinel %s: no finished failover from %s after %s: %s", s.Addr, old, within, why)
	}
	return why
}

// RedisCluster is a Redis Cluster of redis-server processes on loopback.
type RedisCluster struct {
	// Nodes are the processes, primaries and replicas, in start order; which
	// is which changes with failovers.
	Nodes []*RedisServer

	primaries int
}

// StartRedisCluster starts primaries×(1+replicas) redis-server processes in
// cluster mode with args (see StartRedisServer), joins them with
// redis-cli --cluster create --cluster-replicas replicas, and waits until
// every node reports cluster_state:ok and knows every other, and every
// replica's link is up. It skips the test under -short.
func StartRedisCluster(t testing.TB, primaries, replicas int, args ...string) *RedisCluster {
	t.Helper()
	Short(t)
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redis-cli is needed for this test (Debian's redis-tools): %v", err)
	}
	c := &RedisCluster{primaries: primaries}
	for range primaries * (1 + replicas) {
		c.Nodes = append(c.Nodes, startRedis(t, func(port int, dir string) []string {
			return append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
				"--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0", "--dir", dir,
				"--logfile", filepath.Join(dir, "redis.log"),
				"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf")}, args...)
		}))
	}
	create := []string{"--cluster", "create"}
	create = append(create, c.Addrs()...)
	create = append(create, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, create...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v: %s", err, out)
	}
	c.WaitHealthy(t, 30*time.Second)
	return c
}

// Addrs returns the addresses of all nodes.
func (c *RedisCluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr
	}
	return addrs
}

// Node returns the node at addr, or nil.
func (c *RedisCluster) Node(addr string) *RedisServer {
	for _, n := range c.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr, master string // master is the id of a replica's primary, or "-"
	flags            []string
	slots            [][2]int
}

func (n clusterNode) is(flag string) bool { return slices.Contains(n.flags, flag) }

func (n clusterNode) owns(slot int) bool {
	for _, r := range n.slots {
		if r[0] <= slot && slot <= r[1] {
			return true
		}
	}
	return false
}

// clusterView returns the cluster as node s sees it (CLUSTER NODES).
func clusterView(ctx context.Context, s *RedisServer) ([]clusterNode, error) {
	text, err := s.client.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, err
	}
	var nodes []clusterNode
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := clusterNode{id: f[0], addr: addr, flags: strings.Split(f[2], ","), master: f[3]}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue // a slot being migrated or imported
			}
			lo, hi, _ := strings.Cut(r, "-")
			a, err1 := strconv.Atoi(lo)
			b := a
			var err2 error
			if hi != "" {
				b, err2 = strconv.Atoi(hi)
			}
			if err1 == nil && err2 == nil {
				n.slots = append(n.slots, [2]int{a, b})
			}
		}
		nodes = append(nodes, n)
	}
	return nodes, sc.Err()
}

// ownerView is what one node says of the cluster: each primary with slots
// and whether it is flagged failed, in a comparable form.
func ownerView(nodes []clusterNode) string {
	var b bytes.Buffer
	var lines []string
	for _, n := range nodes {
		if n.is("master") && len(n.slots) > 0 {
			lines = append(lines, fmt.Sprintf("%s %v fail=%v", n.addr, n.slots, n.is("fail") || n.is("fail?")))
		}
	}
	slices.Sort(lines)
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	return b.String()
}

// WaitHealthy waits until every running node reports cluster_state:ok and
// knows every node, all running nodes agree on which primaries own the
// slots and flag none of them failed, each owner is running, every running
// node sees as many replicas as the cluster was made with, and every
// running replica's link is up.
func (c *RedisCluster) WaitHealthy(t testing.TB, within time.Duration) {
	t.Helper()
	var why string
	if !poll(within, func() bool {
		why = c.unhealthy()
		return why == ""
	}) {
		t.Fatalf("redis cluster not healthy after %s: %s", within, why)
	}
}

// unhealthy returns why the cluster is not healthy, or "".
func (c *RedisCluster) unhealthy() string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var view string
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		info, err := n.client.ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Sprintf("%s: CLUSTER INFO: %v", n.Addr, err)
		}
		ci := parseInfo(info)
		if ci["cluster_state"] != "ok" || ci["cluster_known_nodes"] != strconv.Itoa(len(c.Nodes)) {
			return fmt.Sprintf("%s: cluster_state %s, %s nodes known", n.Addr, ci["cluster_state"], ci["cluster_known_nodes"])
		}
		nodes, err := clusterView(ctx, n)
		if err != nil {
			return fmt.Sprintf("%s: CLUSTER NODES: %v", n.Addr, err)
		}
		v := ownerView(nodes)
		if view == "" {
			view = v
		} else if v != view {
			return fmt.Sprintf("nodes disagree on the slot owners:\n%s\nand\n%s", view, v)
		}
		replicas := 0
		for _, o := range nodes {
			if o.is("slave") {
				replicas++
			}
		}
		if want := len(c.Nodes) - c.primaries; replicas != want {
			return fmt.Sprintf("%s sees %d replicas, not %d", n.Addr, replicas, want)
		}
		if strings.Contains(v, "fail=true") {
			return fmt.Sprintf("%s flags a slot owner failed:\n%s", n.Addr, v)
		}
		for _, o := range nodes {
			if o.is("master") && len(o.slots) > 0 {
				if owner := c.Node(o.addr); owner == nil || !owner.Running() {
					return fmt.Sprintf("slot owner %s is not running", o.addr)
				}
			}
		}
		repl, err := n.Info(ctx, "replication")
		if err != nil {
			return fmt.Sprintf("%s: INFO replication: %v", n.Addr, err)
		}
		if repl["role"] == "slave" && repl["master_link_status"] != "up" {
			return fmt.Sprintf("%s: replica link %s", n.Addr, repl["master_link_status"])
		}
	}
	return ""
}

// Failover moves the slot of key (a key as stored, hash tags apply) from
// its primary to a replica of that primary and returns both. With kill it
// first SIGKILLs the primary and then runs CLUSTER FAILOVER FORCE on the
// replica, or CLUSTER FAILOVER TAKEOVER if that did not promote it within
// 5s; without kill it runs CLUSTER FAILOVER, which waits for the replica
// to catch up. It returns once the replica reports role master and every
// running node names it as the slot's owner. A killed primary stays down:
// Restart brings it back, as a replica of its successor.
func (c *RedisCluster) Failover(t testing.TB, key string, kill bool) (primary, promoted *RedisServer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var live *RedisServer
	for _, n := range c.Nodes {
		if n.Running() {
			live = n
			break
		}
	}
	if live == nil {
		t.Fatal("redis cluster: no node is running")
	}
	slot64, err := live.client.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatalf("CLUSTER KEYSLOT: %v", err)
	}
	slot := int(slot64)
	nodes, err := clusterView(ctx, live)
	if err != nil {
		t.Fatalf("CLUSTER NODES: %v", err)
	}
	var owner *clusterNode
	for i, n := range nodes {
		if n.is("master") && n.owns(slot) {
			owner = &nodes[i]
		}
	}
	if owner == nil {
		t.Fatalf("redis cluster: no primary owns slot %d", slot)
	}
	for _, n := range nodes {
		if n.is("slave") && n.master == owner.id && !n.is("fail") {
			if s := c.Node(n.addr); s != nil && s.Running() {
				promoted = s
				break
			}
		}
	}
	primary = c.Node(owner.addr)
	if primary == nil || promoted == nil {
		t.Fatalf("redis cluster: slot %d: primary %s has no running replica here", slot, owner.addr)
	}
	if kill {
		primary.Kill()
		if err := promoted.client.Do(ctx, "CLUSTER", "FAILOVER", "FORCE").Err(); err != nil {
			t.Fatalf("CLUSTER FAILOVER FORCE on %s: %v", promoted.Addr, err)
		}
		if !poll(5*time.Second, func() bool { return isMaster(promoted) }) {
			if err := promoted.client.Do(ctx, "CLUSTER", "FAILOVER", "TAKEOVER").Err(); err != nil {
				t.Fatalf("CLUSTER FAILOVER TAKEOVER on %s: %v", promoted.Addr, err)
			}
		}
	} else if err := promoted.client.Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		t.Fatalf("CLUSTER FAILOVER on %s: %v", promoted.Addr, err)
	}
	promoted.WaitRole(t, "master", 15*time.Second)
	var why string
	if !poll(15*time.Second, func() bool {
		why = ""
		for _, n := range c.Nodes {
			if !n.Running() {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			view, err := clusterView(ctx, n)
			cancel()
			if err != nil {
				why = err.Error()
				return false
			}
			for _, v := range view {
				if v.is("master") && v.owns(slot) && v.addr != promoted.Addr {
					why = fmt.Sprintf("%s names %s the owner of slot %d", n.Addr, v.addr, slot)
					return false
				}
			}
		}
		return true
	}) {
		t.Fatalf("redis cluster: failover of slot %d to %s not agreed after 15s: %s", slot, promoted.Addr, why)
	}
	return primary, promoted
}

func isMaster(s *RedisServer) bool {
	info, err := s.Info(context.Background(), "replication")
	return err == nil && info["role"] == "master"
}
