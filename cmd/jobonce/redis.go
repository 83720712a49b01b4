package main

import (
	"context"
	_ "embed"
	"fmt"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/redisops"
)

//go:embed forget.lua
var forgetLua string

var forgetScript = redis.NewScript(forgetLua)

// redisKeys is a Guard's Redis, as the commands act on it.
type redisKeys struct {
	client  redis.UniversalClient
	store   *redisstore.Store
	addr    string // the server's address; a Cluster's seed nodes
	db      int
	cluster bool
}

var _ keyStore = (*redisKeys)(nil)

// openRedis returns a client for the Redis at rawURL, which must hold no
// '#': a Redis Cluster when the URL names more of its nodes with addr
// parameters (go-redis's cluster URL: redis://host:port?addr=host:port),
// else one server. It connects on the first command.
func openRedis(rawURL string) (*redisKeys, error) {
	if err := checkFragment(rawURL); err != nil {
		return nil, fmt.Errorf("-redis: %w", err)
	}
	if u, err := url.Parse(rawURL); err == nil && u.Query().Has("addr") {
		return openRedisCluster(rawURL)
	}
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("-redis: %w", err)
	}
	opt.ContextTimeoutEnabled = true // each command ends with its context
	client := redis.NewClient(opt)
	store, err := redisstore.New(client, &redisstore.Config{SkipEvictionCheck: true})
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	return &redisKeys{client: client, store: store, addr: opt.Addr, db: opt.DB}, nil
}

// openRedisCluster returns a client for the Redis Cluster whose nodes
// rawURL names.
func openRedisCluster(rawURL string) (*redisKeys, error) {
	opt, err := redis.ParseClusterURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("-redis: %w", err)
	}
	opt.ContextTimeoutEnabled = true
	client := redis.NewClusterClient(opt)
	store, err := redisstore.New(client, &redisstore.Config{SkipEvictionCheck: true})
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	return &redisKeys{client: client, store: store, addr: strings.Join(opt.Addrs, ", "), cluster: true}, nil
}

func (r *redisKeys) inspect(ctx context.Context, key string) (record, error) {
	rec, err := redisops.Inspect(ctx, r.client, key)
	if err != nil {
		return record{}, err
	}
	return record{
		State: rec.State, Token: rec.Token, Fence: rec.Fence, Fingerprint: rec.Fingerprint,
		Result: rec.Result, TTL: rec.TTL, Age: rec.Age, value: rec.Value,
	}, nil
}

func (r *redisKeys) release(ctx context.Context, key string, token driver.Token) error {
	return r.store.Release(ctx, key, token)
}

func (r *redisKeys) forget(ctx context.Context, key string, rec record) (bool, error) {
	if rec.State != driver.StateDone || rec.value == "" {
		return false, nil
	}
	n, err := forgetScript.Run(ctx, r.client, []string{key}, rec.value).Int()
	if err != nil {
		return false, fmt.Errorf("forget: %w", err)
	}
	return n == 1, nil
}

func (r *redisKeys) name() string { return "Redis" }

func (r *redisKeys) where() string {
	if r.cluster {
		return "Redis Cluster at " + r.addr
	}
	return fmt.Sprintf("Redis database %d at %s", r.db, r.addr)
}

func (r *redisKeys) databaseHint() string {
	if r.cluster {
		return "the Guard uses another Redis (-redis, $REDIS_URL)"
	}
	return "the Guard uses another Redis or database number (-redis, $REDIS_URL: redis://host:port/N)"
}

func (r *redisKeys) close() { _ = r.client.Close() }

// quietClientLogs silences go-redis's logger, which prints a line of its own
// (pool.go) for each failed dial before the command's error. pgx logs
// nothing unless given a tracer, and the command gives it none.
func quietClientLogs() { redis.SetLogger(quietLogger{}) }

// quietLogger drops every message.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}
