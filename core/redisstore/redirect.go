package redisstore

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// maxRedirects bounds the ASK and MOVED redirects one entry follows within
// a call, as go-redis's ClusterOptions.MaxRedirects does by default.
const maxRedirects = 3

// redirect reports where err, a script's reply, sends its request: an ASK
// (the slot is being migrated and the key is on the importing primary,
// which takes the request after ASKING) or a MOVED (the slot belongs to
// another primary now). ok is false for any other error.
func redirect(err error) (addr string, ask, ok bool) {
	if err == nil {
		return "", false, false
	}
	if addr, ok := redis.IsAskError(err); ok {
		return nodeAddr(addr), true, true
	}
	if addr, ok := redis.IsMovedError(err); ok {
		return nodeAddr(addr), false, true
	}
	return "", false, false
}

// nodeAddr writes a redirect's "host:port" as a client's address: an IPv6
// host, which Redis writes bare, in brackets.
func nodeAddr(addr string) string {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 || strings.HasPrefix(addr, "[") || strings.Count(addr, ":") == 1 {
		return addr
	}
	return net.JoinHostPort(addr[:i], addr[i+1:])
}

// primaries reloads cluster's slot map and returns the client of each
// primary in it by address.
func primaries(ctx context.Context, cluster *redis.ClusterClient) (map[string]*redis.Client, error) {
	var mu sync.Mutex
	byAddr := make(map[string]*redis.Client)
	err := cluster.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		byAddr[c.Options().Addr] = c
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("jobonce: redisstore: reload the cluster's slot map: %w", err)
	}
	return byAddr, nil
}
