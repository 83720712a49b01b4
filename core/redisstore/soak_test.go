package redisstore_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// TestSignalSoak runs, for JOBONCE_SOAK (skipped when unset), jobs whose
// copies wait for them on four Guards sharing a Redis of the test's own,
// while every 15s the Listeners' connections are killed (CLIENT KILL TYPE
// pubsub), or every connection of the clients, or the server is restarted
// (down for half a second). The signal comes back after each, and neither
// goroutines nor connections grow.
func TestSignalSoak(t *testing.T) {
	d := testenv.SoakDuration(t)
	srv := testenv.StartRedisServer(t)
	name := "jobonce-soak-" + testenv.RandomID(4)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ClientName: name, ContextTimeoutEnabled: true,
		DialTimeout: time.Second, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	s, err := redisstore.New(client, &redisstore.Config{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	admin := srv.Client()
	kill := func(kind string) func() {
		return func() { _ = admin.Do(context.Background(), "CLIENT", "KILL", "TYPE", kind).Err() }
	}
	testenv.RunSignalSoak(t, d, testenv.SignalSoak{
		Store: s, Prefix: testenv.Prefix(t), Guards: 4, Jobs: 8, FaultEvery: 15 * time.Second,
		Faults: []testenv.Fault{
			{Name: "CLIENT KILL TYPE pubsub", Apply: kill("pubsub")},
			{Name: "CLIENT KILL TYPE normal", Apply: kill("normal")},
			{Name: "a restart", Apply: func() {
				srv.Kill()
				time.Sleep(500 * time.Millisecond) // the server is down
				srv.Restart()
			}},
		},
		Conns: func(ctx context.Context) (all, listeners int, err error) {
			list, err := admin.ClientList(ctx).Result()
			if err != nil {
				return 0, 0, err
			}
			for line := range strings.SplitSeq(strings.TrimSpace(list), "\n") {
				f := fields(line)
				if f["name"] != name {
					continue
				}
				all++
				switch f["cmd"] {
				case "subscribe", "unsubscribe", "ping":
					listeners++
				}
			}
			return all, listeners, nil
		},
	})
}
