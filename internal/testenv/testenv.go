// Package testenv connects jobonce's integration tests to their servers. The
// addresses come from TEST_REDIS_URL, TEST_DATABASE_URL, TEST_SQS_ENDPOINT,
// TEST_AMQP_URL and TEST_NATS_URL, with local defaults. A missing server
// fails the test loudly: the test script (scripts/test.sh) starts the
// servers.
//
// It also holds what several test packages share: Guards on those servers
// and on memstore (guard.go), stores that hang or go away (hang.go,
// proxy.go), and worker processes that crash tests kill (worker.go).
package testenv

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// RedisURL returns the test Redis URL.
func RedisURL() string {
	return cmp.Or(os.Getenv("TEST_REDIS_URL"), "redis://127.0.0.1:6379/0")
}

// DatabaseURL returns the test PostgreSQL URL.
func DatabaseURL() string {
	return cmp.Or(os.Getenv("TEST_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
}

// AMQPURL returns the test RabbitMQ URL.
func AMQPURL() string {
	return cmp.Or(os.Getenv("TEST_AMQP_URL"), "amqp://guest:guest@127.0.0.1:5672/")
}

// NATSURL returns the test NATS server's URL; the server runs JetStream.
func NATSURL() string {
	return cmp.Or(os.Getenv("TEST_NATS_URL"), "nats://127.0.0.1:4222")
}

// SQSEndpoint returns the test SQS endpoint. The test script starts the
// server and sets TEST_SQS_ENDPOINT; without it the test fails.
func SQSEndpoint(t testing.TB) string {
	t.Helper()
	ep := os.Getenv("TEST_SQS_ENDPOINT")
	if ep == "" {
		t.Fatal("TEST_SQS_ENDPOINT is not set: run the tests through scripts/test.sh, which starts the SQS server")
	}
	return ep
}

// Short skips an integration test under -short.
func Short(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs servers; run without -short")
	}
}

// RandomID returns n random bytes in hex.
func RandomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Prefix returns a key prefix unique to this test, so tests sharing one Redis
// never see each other's keys.
func Prefix(t testing.TB) string {
	name := strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
	return "jobonce-test:" + name + ":" + RandomID(4) + ":"
}

// Redis returns a client for the test Redis, checked with PING, closed at the
// end of the test. Keys under prefix are deleted at cleanup when prefix is
// not empty.
func Redis(t testing.TB, prefix string) *redis.Client {
	t.Helper()
	Short(t)
	opt, err := redis.ParseURL(RedisURL())
	if err != nil {
		t.Fatalf("TEST_REDIS_URL: %v", err)
	}
	client := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		t.Fatalf("Redis at %s does not answer (start it with scripts/test.sh): %v", RedisURL(), err)
	}
	t.Cleanup(func() {
		if prefix != "" {
			DeletePrefix(context.Background(), client, prefix)
		}
		_ = client.Close()
	})
	return client
}

// DeletePrefix deletes every key under prefix.
func DeletePrefix(ctx context.Context, client redis.UniversalClient, prefix string) {
	iter := client.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 1000 {
			client.Del(ctx, batch...)
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		client.Del(ctx, batch...)
	}
}

// Postgres returns a pool on the test database whose connections use a
// schema of their own (search_path), created now and dropped at cleanup. It
// returns the schema name too.
func Postgres(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	Short(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin, err := pgxpool.New(ctx, DatabaseURL())
	if err != nil {
		t.Fatalf("TEST_DATABASE_URL: %v", err)
	}
	defer admin.Close()
	if err := admin.Ping(ctx); err != nil {
		t.Fatalf("PostgreSQL at %s does not answer (start it with scripts/test.sh): %v", DatabaseURL(), err)
	}
	schema := "jobonce_test_" + RandomID(6)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, schemaConfig(t, schema))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin, err := pgxpool.New(ctx, DatabaseURL())
		if err != nil {
			return
		}
		defer admin.Close()
		_, _ = admin.Exec(ctx, fmt.Sprintf("DROP SCHEMA %s CASCADE", schema))
	})
	return pool, schema
}

// PostgresOn returns a pool on the test database whose connections use an
// existing schema (search_path), such as one a parent process made with
// Postgres, closed at cleanup. It opens up to maxConns connections (0 for
// pgx's default) and sets the given parameter name and value pairs on each.
func PostgresOn(t testing.TB, schema string, maxConns int32, params ...string) *pgxpool.Pool {
	t.Helper()
	cfg := schemaConfig(t, schema)
	for i := 0; i+1 < len(params); i += 2 {
		cfg.ConnConfig.RuntimeParams[params[i]] = params[i+1]
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// schemaConfig returns the test database's pool configuration with
// search_path set to schema.
func schemaConfig(t testing.TB, schema string) *pgxpool.Config {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(DatabaseURL())
	if err != nil {
		t.Fatalf("TEST_DATABASE_URL: %v", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	return cfg
}
