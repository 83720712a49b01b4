package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobonce/jobonce/core/redisstore"
)

// errRisk is wrapped by check's error when it found a risk of a -fail-on
// kind; main exits 2 on it.
var errRisk = errors.New("risk found")

var allKinds = []redisstore.RiskKind{redisstore.RiskEviction, redisstore.RiskPersistence, redisstore.RiskReplication}

// parseFailOn parses -fail-on: kinds separated by commas, "all" or "none".
func parseFailOn(s string) ([]redisstore.RiskKind, error) {
	switch strings.TrimSpace(s) {
	case "all":
		return allKinds, nil
	case "none", "":
		return nil, nil
	}
	var kinds []redisstore.RiskKind
	for name := range strings.SplitSeq(s, ",") {
		kind := redisstore.RiskKind(strings.TrimSpace(name))
		if !slices.Contains(allKinds, kind) {
			return nil, fmt.Errorf("-fail-on: unknown risk kind %q (want eviction, persistence, replication, all or none)", name)
		}
		kinds = append(kinds, kind)
	}
	return kinds, nil
}

// check prints what decides whether each server keeps done markers and a
// RISK line per way it can lose them. Its error wraps errRisk when a risk is
// of a kind in failOn.
func check(ctx context.Context, client redis.UniversalClient, out io.Writer, failOn []redisstore.RiskKind, maxLag time.Duration) error {
	infos, err := redisstore.ReadServerInfo(ctx, client)
	if err != nil {
		return err
	}
	var failing []string
	for _, info := range infos {
		printServer(out, info)
		risks := info.Risks(maxLag)
		for _, r := range risks {
			fmt.Fprintf(out, "  RISK: %s: %s\n", r.Kind, r.Detail)
			if slices.Contains(failOn, r.Kind) && !slices.Contains(failing, string(r.Kind)) {
				failing = append(failing, string(r.Kind))
			}
		}
		if len(risks) == 0 {
			fmt.Fprintln(out, "  ok: done markers survive eviction, restarts and failovers")
		}
	}
	if len(failing) > 0 {
		return fmt.Errorf("%w: %s (-fail-on)", errRisk, strings.Join(failing, ", "))
	}
	return nil
}

func printServer(out io.Writer, info redisstore.ServerInfo) {
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
