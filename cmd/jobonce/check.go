package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/redisops"
)

var checkCommand = &command{
	name:    "check",
	summary: "report whether the store keeps done markers; exit 2 on a risk",
	prefix:  true,
	about: `check reports what decides whether the store keeps done markers, with a RISK line for each way
they can be lost and duplicates run. On Redis, for each server: the eviction policy, persistence
(AOF, RDB) and replication (role, replicas, largest lag); whether the user may use the channels
of the completion signal, under -prefix (ACL &<prefix>* or allchannels: without them, copies that
wait for a running job poll rather than being woken; a note, not a risk); and whether a claim of a
key of its own under -prefix, and its release, succeed (a read-only replica, or a user without
EVALSHA or writes, refuses every claim: exit 1). On PostgreSQL: the version and role, fsync
and synchronous_commit, the standbys and whether commits wait for one, the largest flush lag, the
table, its fence column and expiry index (a missing table or column fails check, exit 1: workers
cannot start on it), the expired rows waiting for Prune, and on a primary, whether a claim under
-prefix and its release succeed (a role without rights on the table fails check, exit 1). It exits 2 when a risk is of a
-fail-on kind, so it can gate a deploy (a CI step, an init container).`,
	flags: func(fs *flag.FlagSet, o *options) {
		fs.StringVar(&o.failOn, "fail-on", "all", "risk kinds that fail it (exit 2), comma-separated among eviction, persistence, replication; or all, or none")
		fs.DurationVar(&o.maxLag, "max-lag", 10*time.Second, "replica lag above which replication is a risk")
	},
	run: runCheck,
}

func runCheck(ctx context.Context, c *invocation) error {
	failOn, err := parseFailOn(c.opt.failOn)
	if err != nil {
		return err
	}
	if c.opt.maxLag < 0 {
		return fmt.Errorf("-max-lag: %s is negative", c.opt.maxLag)
	}
	b, err := pickBackend(c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if b.postgres {
		t := pgTable{schema: c.opt.schema, name: c.opt.table}
		if err := t.check(); err != nil {
			return err
		}
		pool, err := openPool(ctx, b.url)
		if err != nil {
			return err
		}
		defer pool.Close()
		return checkPostgres(ctx, pool, t, c.out, failOn, c.opt.maxLag, c.opt.prefix)
	}
	r, err := openRedis(b.url)
	if err != nil {
		return err
	}
	defer r.close()
	return check(ctx, r.client, c.out, failOn, c.opt.maxLag, c.opt.prefix)
}

// errRisk is wrapped by check's error when it found a risk of a -fail-on
// kind; main exits 2 on it.
var errRisk = errors.New("risk found")

var allKinds = []redisops.RiskKind{redisops.RiskEviction, redisops.RiskPersistence, redisops.RiskReplication}

// parseFailOn parses -fail-on: kinds separated by commas, "all" or "none".
func parseFailOn(s string) ([]redisops.RiskKind, error) {
	switch strings.TrimSpace(s) {
	case "all":
		return allKinds, nil
	case "none", "":
		return nil, nil
	}
	var kinds []redisops.RiskKind
	for name := range strings.SplitSeq(s, ",") {
		kind := redisops.RiskKind(strings.TrimSpace(name))
		if !slices.Contains(allKinds, kind) {
			return nil, fmt.Errorf("-fail-on: unknown risk kind %q (want eviction, persistence, replication, all or none)", name)
		}
		kinds = append(kinds, kind)
	}
	return kinds, nil
}

// failing returns the kinds of risks in failOn, each once.
func failing(risks []redisops.Risk, failOn []redisops.RiskKind, seen []string) []string {
	for _, r := range risks {
		if slices.Contains(failOn, r.Kind) && !slices.Contains(seen, string(r.Kind)) {
			seen = append(seen, string(r.Kind))
		}
	}
	return seen
}

// riskError returns the error of a check that found risks of the kinds
// failing, or nil when there are none.
func riskError(failing []string) error {
	if len(failing) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s (-fail-on)", errRisk, strings.Join(failing, ", "))
}

// check prints what decides whether each server keeps done markers and a
// RISK line per way it can lose them, then whether the user may use the
// completion signal's channels under prefix. Its error wraps errRisk when a
// risk is of a kind in failOn.
func check(ctx context.Context, client redis.UniversalClient, out io.Writer, failOn []redisops.RiskKind, maxLag time.Duration, prefix string) error {
	infos, err := redisops.ReadServerInfo(ctx, client)
	if err != nil {
		return err
	}
	var found []string
	for _, info := range infos {
		printServer(out, info)
		risks := append(info.Risks(maxLag), unchecked(info)...)
		printRisks(out, risks)
		if len(risks) == 0 {
			fmt.Fprintln(out, "  ok: done markers survive eviction, restarts and failovers")
		}
		found = failing(risks, failOn, found)
	}
	if err := printChannels(ctx, client, out, prefix); err != nil {
		return err
	}
	store, err := redisstore.New(client, &redisstore.Config{SkipEvictionCheck: true, CheckEvery: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	if err := checkClaims(ctx, store, out, prefix); err != nil {
		return err
	}
	return riskError(found)
}

// printChannels prints whether the user may use the channels under prefix,
// those of the completion signal of a Guard whose KeyPrefix it is.
func printChannels(ctx context.Context, client redis.UniversalClient, out io.Writer, prefix string) error {
	ok, err := redisops.ChannelAllowed(ctx, client, prefix)
	if err != nil {
		return fmt.Errorf("jobonce: redisstore: PUBLISH %q: %w", prefix, err)
	}
	if ok {
		fmt.Fprintf(out, "completion signal: the user may use the channels under %q\n", prefix)
		return nil
	}
	fmt.Fprintf(out, "completion signal: NOTE: the user may not use the channels under %q (NOPERM): copies that wait for a running job "+
		"poll the store instead of being woken when it ends; grant ACL &%s* or allchannels\n", prefix, prefix)
	return nil
}

// unchecked returns, as risks, the settings check could not read: a server
// that refuses CONFIG GET may evict done markers or keep none across a
// restart, and a check that cannot tell must not pass.
func unchecked(info redisops.ServerInfo) []redisops.Risk {
	var risks []redisops.Risk
	if info.MaxmemoryPolicy == "" {
		risks = append(risks, redisops.Risk{Kind: redisops.RiskEviction,
			Detail: "maxmemory-policy unknown (CONFIG GET refused): could not check that done markers are never evicted"})
	}
	if !info.ConfigKnown && !info.AppendOnly {
		risks = append(risks, redisops.Risk{Kind: redisops.RiskPersistence,
			Detail: "RDB save settings unknown (CONFIG GET refused) and no AOF: could not check that done markers survive a restart"})
	}
	return risks
}

func printRisks(out io.Writer, risks []redisops.Risk) {
	for _, r := range risks {
		fmt.Fprintf(out, "  RISK: %s: %s\n", r.Kind, r.Detail)
	}
}

func printServer(out io.Writer, info redisops.ServerInfo) {
	fmt.Fprintf(out, "server %s (run_id %s, up %s)\n", info.Addr, info.RunID, info.Uptime)
	policy := info.MaxmemoryPolicy
	if policy == "" {
		policy = "unknown"
	}
	fmt.Fprintf(out, "  maxmemory-policy: %s\n", policy)
	save := "unknown (CONFIG GET refused)"
	if info.ConfigKnown {
		save = fmt.Sprint(info.SaveConfigured)
	}
	fmt.Fprintf(out, "  persistence: appendonly %t, save configured %s\n", info.AppendOnly, save)
	fmt.Fprintf(out, "  replication: role %s (replid %s), %d connected replicas, largest lag %s\n",
		info.Role, info.ReplID, info.ConnectedReplicas, info.ReplicaLag)
}

// checkClaims claims a key of its own under prefix in store and releases
// it, as Guard.Ready does: a store whose settings keep done markers may
// still refuse every claim (a read-only replica, a user or role without
// the rights a claim needs), and then every job fails closed.
func checkClaims(ctx context.Context, store driver.Store, out io.Writer, prefix string) error {
	g, err := core.New(store, &core.Config{KeyPrefix: prefix, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return fmt.Errorf("-prefix: %w", err)
	}
	defer g.Close()
	if err := g.Ready(ctx); err != nil {
		fmt.Fprintf(out, "claims: FAIL: a claim under %q fails: every job fails closed\n", prefix)
		return fmt.Errorf("check: a claim under %q fails, as every worker's would: %w", prefix, err)
	}
	fmt.Fprintf(out, "claims: a claim and its release under %q succeed\n", prefix)
	return nil
}
