package redisops

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ServerInfo describes what decides whether a Redis server keeps done
// markers: eviction, persistence and replication. ReadServerInfo reads it.
type ServerInfo struct {
	// Addr is the server's address: the one the client dials, or for a
	// failover (Sentinel) client the primary's own address as it reports it
	// (CLIENT INFO laddr, empty if refused).
	Addr string
	// RunID is INFO's run_id. It changes on every restart: a server that
	// restarted without persistence forgot every done marker.
	RunID string
	// Uptime is the time since the server started (uptime_in_seconds).
	Uptime time.Duration
	// Role is "master" or "slave", as INFO replication reports it.
	Role string
	// ReplID is the replication ID (master_replid). It changes when a replica
	// is promoted: the writes the old primary had not sent to it are lost.
	ReplID string
	// ConnectedReplicas is the number of replicas connected to a primary.
	ConnectedReplicas int
	// ReplicaLag is the largest lag of the connected replicas, in whole
	// seconds as Redis reports it; zero when there are none.
	ReplicaLag time.Duration
	// MaxmemoryPolicy is the eviction policy (CONFIG GET maxmemory-policy,
	// or INFO memory's maxmemory_policy when CONFIG is refused); empty when
	// neither tells.
	MaxmemoryPolicy string
	// AppendOnly reports the append-only file enabled (CONFIG appendonly
	// yes, or INFO persistence aof_enabled).
	AppendOnly bool
	// SaveConfigured reports RDB snapshots configured (a non-empty CONFIG
	// save). Meaningless when ConfigKnown is false.
	SaveConfigured bool
	// ConfigKnown is false when the server refused CONFIG GET, as managed
	// services do; SaveConfigured is then unknown.
	ConfigKnown bool
}

// ReadServerInfo reads, in one pipeline per server, INFO (server,
// replication, persistence and memory) and CONFIG GET maxmemory-policy, save
// and appendonly. A refused CONFIG GET does not fail it: ConfigKnown is
// false. It returns one ServerInfo for a single-node or failover client, one
// per primary for a Cluster client, and one per live shard for a Ring, in
// address order. An error wraps the Redis error of the server that failed.
// The read of each server ends by ctx's deadline whatever the client's
// ContextTimeoutEnabled and ReadTimeout; a Cluster client's read of its
// slots, or a UniversalClient of another type than *redis.Client,
// *redis.ClusterClient and *redis.Ring, ends with ctx only under
// ContextTimeoutEnabled.
func ReadServerInfo(ctx context.Context, client redis.UniversalClient) ([]ServerInfo, error) {
	var each func(context.Context, func(context.Context, *redis.Client) error) error
	switch c := client.(type) {
	case *redis.ClusterClient:
		each = c.ForEachMaster
	case *redis.Ring:
		each = c.ForEachShard
	default:
		info, err := readServer(ctx, client, clientAddr(client))
		if err != nil {
			return nil, err
		}
		return []ServerInfo{info}, nil
	}
	var mu sync.Mutex
	var infos []ServerInfo
	err := each(ctx, func(ctx context.Context, c *redis.Client) error {
		info, err := readServer(ctx, c, clientAddr(c))
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		infos = append(infos, info)
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(infos, func(a, b ServerInfo) int { return strings.Compare(a.Addr, b.Addr) })
	return infos, nil
}

// clientAddr returns the address a client dials, or "" when it has none of
// its own (a failover client resolves the primary through Sentinel).
func clientAddr(client redis.UniversalClient) string {
	c, ok := client.(*redis.Client)
	if !ok || c.Options().Addr == "FailoverClient" {
		return ""
	}
	return c.Options().Addr
}

func readServer(ctx context.Context, client redis.UniversalClient, addr string) (ServerInfo, error) {
	client, err := BoundedBy(ctx, client)
	if err != nil {
		return ServerInfo{}, fmt.Errorf("jobonce: redisstore: INFO on %s: %w", cmp.Or(addr, "the server"), err)
	}
	var info *redis.StringCmd
	var policy, save, aof *redis.MapStringStringCmd
	var self *redis.ClientInfoCmd
	// The pipeline's error is its first failed command's, or the
	// connection's when no command was answered (a refused AUTH leaves the
	// commands without replies and without errors): each command is checked,
	// and an unanswered INFO fails the read.
	_, perr := client.Pipelined(ctx, func(p redis.Pipeliner) error {
		info = p.Info(ctx, "server", "replication", "persistence", "memory")
		policy = p.ConfigGet(ctx, "maxmemory-policy")
		save = p.ConfigGet(ctx, "save")
		aof = p.ConfigGet(ctx, "appendonly")
		if addr == "" {
			self = p.ClientInfo(ctx)
		}
		return nil
	})
	if err := cmp.Or(info.Err(), unanswered(info.Val(), perr)); err != nil {
		return ServerInfo{}, fmt.Errorf("jobonce: redisstore: INFO on %s: %w", cmp.Or(addr, "the server"), err)
	}
	if self != nil && self.Err() == nil && self.Val() != nil {
		addr = self.Val().LAddr
	}
	s, fields := ServerInfo{Addr: addr}, parseInfo(info.Val())
	s.RunID = fields["run_id"]
	s.Uptime = time.Duration(atoi(fields["uptime_in_seconds"])) * time.Second
	s.Role = fields["role"]
	s.ReplID = fields["master_replid"]
	s.ConnectedReplicas = atoi(fields["connected_slaves"])
	for k, v := range fields {
		if n := strings.TrimPrefix(k, "slave"); n != k && n != "" && n[0] >= '0' && n[0] <= '9' {
			s.ReplicaLag = max(s.ReplicaLag, time.Duration(atoi(listField(v, "lag")))*time.Second)
		}
	}
	s.MaxmemoryPolicy = fields["maxmemory_policy"]
	s.AppendOnly = fields["aof_enabled"] == "1"
	if policy.Err() == nil && save.Err() == nil && aof.Err() == nil {
		s.ConfigKnown = true
		s.MaxmemoryPolicy = cmp.Or(policy.Val()["maxmemory-policy"], s.MaxmemoryPolicy)
		s.SaveConfigured = strings.TrimSpace(save.Val()["save"]) != ""
		s.AppendOnly = s.AppendOnly || aof.Val()["appendonly"] == "yes"
	}
	return s, nil
}

// parseInfo returns the "name:value" lines of an INFO reply.
func parseInfo(text string) map[string]string {
	fields := make(map[string]string)
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if name, value, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") {
			fields[name] = value
		}
	}
	return fields
}

// listField returns name's value in an INFO "a=1,b=2" list.
func listField(list, name string) string {
	for item := range strings.SplitSeq(list, ",") {
		if k, v, ok := strings.Cut(item, "="); ok && k == name {
			return v
		}
	}
	return ""
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// RiskKind names a way a server can lose done markers, letting duplicates
// run.
type RiskKind string

// The kinds of Risk.
const (
	// RiskEviction: a maxmemory-policy other than noeviction evicts claims
	// and done markers under memory pressure: volatile-* ones too, since
	// every jobonce key has a TTL.
	RiskEviction RiskKind = "eviction"
	// RiskPersistence: neither the append-only file nor RDB snapshots are
	// configured, so a restart forgets every done marker.
	RiskPersistence RiskKind = "persistence"
	// RiskReplication: a primary has no connected replica, or a replica lags
	// by more than the limit given to Risks, so losing the primary loses its
	// recent done markers (replication is asynchronous).
	RiskReplication RiskKind = "replication"
)

// Risk is one way a server can let duplicates run.
type Risk struct {
	// Kind is the risk's kind.
	Kind RiskKind
	// Detail says what the server reports and what can happen.
	Detail string
}

// Risks returns the ways the server can lose done markers, in the order
// eviction, persistence, replication; nil when it finds none. A replica
// lagging by more than maxLag is a replication risk. What the server does
// not report is no risk: persistence when it refused CONFIG GET and AOF is
// off, and replication on a replica (Role "slave"), which jobonce does not
// write to.
func (i ServerInfo) Risks(maxLag time.Duration) []Risk {
	var risks []Risk
	if evicts(i.MaxmemoryPolicy) {
		risks = append(risks, Risk{RiskEviction, fmt.Sprintf(
			"maxmemory-policy %s: duplicates can run after memory pressure evicts done markers; use noeviction", i.MaxmemoryPolicy)})
	}
	if i.ConfigKnown && !i.AppendOnly && !i.SaveConfigured {
		risks = append(risks, Risk{RiskPersistence,
			"no AOF and no RDB save: duplicates can run after a restart, which forgets every done marker; use appendonly yes"})
	}
	if i.Role == "master" {
		switch {
		case i.ConnectedReplicas == 0:
			risks = append(risks, Risk{RiskReplication,
				"primary with no connected replica: duplicates can run after this server is lost, with every done marker on it"})
		case i.ReplicaLag > maxLag:
			risks = append(risks, Risk{RiskReplication, fmt.Sprintf(
				"replica lag %s is above %s: duplicates can run after a failover, which loses the done markers of the last %s",
				i.ReplicaLag, maxLag, i.ReplicaLag)})
		}
	}
	return risks
}

// evicts reports whether a maxmemory-policy can evict jobonce keys under
// memory pressure: every policy but noeviction, volatile-* included, since
// every claim and done marker has a TTL. An unknown policy ("") is no
// finding.
func evicts(policy string) bool { return policy != "" && policy != "noeviction" }

// unanswered returns the pipeline's error when INFO got no reply at all.
func unanswered(info string, pipelineErr error) error {
	if info == "" {
		return pipelineErr
	}
	return nil
}
