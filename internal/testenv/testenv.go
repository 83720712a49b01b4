// Package testenv connects jobonce's integration tests to their servers. The
// addresses come from TEST_REDIS_URL, TEST_SQS_ENDPOINT, TEST_AMQP_URL and
// TEST_NATS_URL, with local defaults; PostgreSQL's, TEST_DATABASE_URL, is
// internal/pgtest's, a module of its own so that pgx stays out of the
// library's module. A missing server
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
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisURL returns the test Redis URL.
func RedisURL() string {
	return cmp.Or(os.Getenv("TEST_REDIS_URL"), "redis://127.0.0.1:6379/0")
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
