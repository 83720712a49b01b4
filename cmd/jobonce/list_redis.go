package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/internal/redisops"
)

// scanCount is the COUNT of each SCAN: the keys a server looks at per call.
const scanCount = 1000

func (r *redisKeys) list(ctx context.Context, o listOptions) (listing, error) {
	return listRedis(ctx, r.client, o)
}

// listRedis lists the claims (and with o.done the done markers) under
// o.prefix on every server of client: each primary of a Cluster client,
// else its one server.
func listRedis(ctx context.Context, client redis.UniversalClient, o listOptions) (listing, error) {
	cluster, ok := client.(*redis.ClusterClient)
	if !ok {
		return scanServer(ctx, client, o)
	}
	var mu sync.Mutex
	all := listing{}
	servers := 0
	err := cluster.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		l, err := scanServer(ctx, node, o)
		if err != nil {
			return fmt.Errorf("%s: %w", node.Options().Addr, err)
		}
		mu.Lock()
		defer mu.Unlock()
		servers++
		all.claims = append(all.claims, l.claims...)
		all.done = append(all.done, l.done...)
		all.doneCount += l.doneCount
		all.others += l.others
		all.read += l.read
		all.partial = all.partial || l.partial
		for _, n := range l.notes {
			all.notes = append(all.notes, node.Options().Addr+": "+n)
		}
		return nil
	})
	if err != nil {
		return listing{}, err
	}
	all.notes = append([]string{fmt.Sprintf("Scanned the %d primaries of the Cluster.", servers)}, all.notes...)
	return all, nil
}

// scanServer lists the claims (and with o.done the done markers) under
// o.prefix on the one server client talks to: SCAN with MATCH and COUNT,
// until the scan ends or it has looked at o.scan keys, reading the first
// redisops.HeadLen bytes of each value, its TTL and the server's clock in
// one pipeline per page.
func scanServer(ctx context.Context, client redis.UniversalClient, o listOptions) (listing, error) {
	l := listing{}
	pattern := globEscape(o.prefix) + "*"
	count := int64(min(scanCount, o.scan))
	var cursor uint64
	looked := 0
	for {
		keys, next, err := client.Scan(ctx, cursor, pattern, count).Result()
		if err != nil {
			return listing{}, fmt.Errorf("SCAN: %w", err)
		}
		looked += int(count)
		if err := readHeads(ctx, client, keys, o, &l); err != nil {
			return listing{}, err
		}
		cursor = next
		if cursor == 0 {
			break
		}
		if looked >= o.scan {
			l.partial = true
			break
		}
	}
	if l.partial {
		size, err := client.DBSize(ctx).Result()
		if err != nil {
			return listing{}, fmt.Errorf("DBSIZE: %w", err)
		}
		l.notes = append(l.notes, fmt.Sprintf("The scan stopped after about %d of the database's %d keys (-scan %d): claims among the rest are not listed.", looked, size, o.scan))
	}
	return l, nil
}

// readHeads reads keys' values' heads, TTLs and the server's clock in one
// pipeline, and adds what they hold to l.
func readHeads(ctx context.Context, client redis.UniversalClient, keys []string, o listOptions, l *listing) error {
	if len(keys) == 0 {
		return nil
	}
	heads := make([]*redis.StringCmd, len(keys))
	ttls := make([]*redis.DurationCmd, len(keys))
	var now *redis.TimeCmd
	_, err := client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, key := range keys {
			heads[i] = p.GetRange(ctx, key, 0, redisops.HeadLen-1)
			ttls[i] = p.PTTL(ctx, key)
		}
		now = p.Time(ctx)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("reading %d keys: %w", len(keys), err)
	}
	for i, key := range keys {
		l.read++
		ttl := ttls[i].Val()
		if ttls[i].Err() != nil || ttl == -2 || heads[i].Val() == "" {
			continue // gone since the scan found it
		}
		rec, ok := redisops.ReadHead(heads[i].Val(), max(ttl, 0), now.Val()) // a key without a TTL (-1) has none left
		switch {
		case !ok:
			l.others++
		case rec.State == driver.StateRunning:
			l.claims = append(l.claims, entry{key: key, state: rec.State, token: rec.Token, fence: rec.Fence, age: rec.Age, left: rec.TTL})
		default:
			l.doneCount++
			if o.done {
				l.done = append(l.done, entry{key: key, state: rec.State, left: rec.TTL})
			}
		}
	}
	return nil
}

// globEscape escapes the bytes SCAN's MATCH reads as a pattern.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`*?[]\`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
