package redisstore_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// records keeps the log records at Warn and above, and Info.
type records struct {
	mu   sync.Mutex
	msgs []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec)
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// events returns the "event" attribute of every Warn record, in order.
func (r *records) events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.msgs {
		if rec.Level < slog.LevelWarn {
			continue
		}
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == "event" {
				out = append(out, a.Value.String())
			}
			return true
		})
	}
	return out
}

// watched is a Store on client that checks its server at every claim, with
// its log records and its metrics.
type watched struct {
	store  *redisstore.Store
	logs   *records
	reader *sdkmetric.ManualReader
}

func newWatched(t *testing.T, client redis.UniversalClient) *watched {
	t.Helper()
	w := &watched{logs: &records{}, reader: sdkmetric.NewManualReader()}
	s, err := redisstore.New(client, &redisstore.Config{Logger: slog.New(w.logs), CheckEvery: time.Nanosecond,
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(w.reader))})
	require.NoError(t, err)
	w.store = s
	return w
}

// claim makes a claim, within which the Store checks its server.
func (w *watched) claim(t *testing.T) {
	t.Helper()
	_, err := w.store.Claim(context.Background(), driver.ClaimRequest{Key: "watch:" + driver.NewToken().String(), Token: driver.NewToken(), Lease: time.Minute})
	require.NoError(t, err)
}

// counts returns jobonce.redis.events by event.
func (w *watched) counts(t *testing.T) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, w.reader.Collect(context.Background(), &rm))
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "jobonce.redis.events" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				ev, _ := dp.Attributes.Value("event")
				out[ev.AsString()] += dp.Value
			}
		}
	}
	return out
}

// A restart is noticed at the next check, logged once at Warn and counted;
// the persistence risk the server had from the start was reported once, at
// New.
func TestWatchNoticesARestart(t *testing.T) {
	server := testenv.StartRedisServer(t)
	w := newWatched(t, server.Client())
	require.Equal(t, []string{"persistence"}, w.logs.events(), "the first check reports the server's risk")
	w.claim(t)
	w.claim(t)
	require.Equal(t, []string{"persistence"}, w.logs.events(), "nothing changed")

	server.Kill()
	server.Restart()
	require.Eventually(t, func() bool {
		_, err := w.store.Claim(context.Background(), driver.ClaimRequest{Key: "watch:after", Token: driver.NewToken(), Lease: time.Minute})
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	w.claim(t)
	require.Equal(t, []string{"persistence", "restart"}, w.logs.events(), "the restart, once")
	require.Equal(t, map[string]int64{"persistence": 1, "restart": 1}, w.counts(t))
}

// A server promoted to primary (its replication ID changes) is a failover.
func TestWatchNoticesAPromotion(t *testing.T) {
	client := testenv.StartRedisServer(t, "--appendonly", "yes").Client()
	other := testenv.StartRedisServer(t, "--appendonly", "yes").Addr
	w := newWatched(t, client)
	require.Empty(t, w.logs.events())
	host, port, err := net.SplitHostPort(other)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, client.SlaveOf(ctx, host, port).Err())
	require.Eventually(t, func() bool {
		info, err := client.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	}, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, client.SlaveOf(ctx, "NO", "ONE").Err())
	w.claim(t)
	w.claim(t)
	require.Equal(t, []string{"failover"}, w.logs.events())
	require.Equal(t, map[string]int64{"failover": 1}, w.counts(t))
}

// A policy that can evict done markers, set on a running server, is
// reported once; setting it back is logged at Info.
func TestWatchNoticesAPolicyChange(t *testing.T) {
	client := testenv.StartRedisServer(t, "--appendonly", "yes").Client()
	w := newWatched(t, client)
	w.claim(t)
	require.Empty(t, w.logs.events())
	ctx := context.Background()
	require.NoError(t, client.ConfigSet(ctx, "maxmemory-policy", "volatile-lru").Err())
	w.claim(t)
	w.claim(t)
	require.Equal(t, []string{"eviction"}, w.logs.events())
	require.NoError(t, client.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	w.claim(t)
	require.Equal(t, []string{"eviction"}, w.logs.events(), "the end of a risk is no warning")
	require.Equal(t, map[string]int64{"eviction": 1}, w.counts(t))
}

// hangInfo is a go-redis hook under which INFO (the check's read of the
// server) gets no answer until its context ends.
type hangInfo struct{}

func (hangInfo) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (hangInfo) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (hangInfo) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if cmd.Name() == "info" {
				<-ctx.Done()
				return ctx.Err()
			}
		}
		return next(ctx, cmds)
	}
}

// A check whose server does not answer delays the claim it runs in by a
// bounded time, far less than the claim's own context, and the claim's
// answer stands.
func TestHungCheckDelaysAClaimBoundedly(t *testing.T) {
	client := testenv.StartRedisServer(t, "--appendonly", "yes").Client()
	w := newWatched(t, client)
	client.AddHook(hangInfo{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	r, err := w.store.Claim(ctx, driver.ClaimRequest{Key: "watch:hung", Token: driver.NewToken(), Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, driver.StateClaimed, r.State)
	require.Less(t, time.Since(start), 2*time.Second, "the check gave up well before the claim's context")
}
