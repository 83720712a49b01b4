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

// has reports whether a record's message is msg.
func (r *records) has(msg string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.msgs {
		if rec.Message == msg {
			return true
		}
	}
	return false
}

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
	return w.sum(t, "jobonce.redis.events")
}

// sum returns the sum name by event.
func (w *watched) sum(t *testing.T, name string) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, w.reader.Collect(context.Background(), &rm))
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
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

// With periodic checks off (CheckEvery < 0), the check New could not make
// is not dropped when the first claim's attempt fails too: the claims make
// it again, one a second at most, until it succeeds, and then no more.
func TestWithoutPeriodicChecksClaimsRetryNewsCheckOnceASecondUntilItRuns(t *testing.T) {
	t.Parallel()
	fake := &fakeRedis{answer: func(int) string { return ":1\r\n" }} // every claim granted
	fake.refuseInfo.Store(true)
	startFake(t, fake)
	client := redis.NewClient(&redis.Options{Addr: fake.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	var logs records
	s, err := redisstore.New(client, &redisstore.Config{Logger: slog.New(&logs), CheckEvery: -1})
	require.NoError(t, err)
	requireCouldNotCheck(t, &logs, "INFO refused")
	require.EqualValues(t, 1, fake.infos.Load(), "New's check")

	start := time.Now()
	for range 20 {
		claimOnce(t, s)
	}
	// One attempt per retryEvery (1s) at most, the first at the first claim.
	require.GreaterOrEqual(t, fake.infos.Load(), int64(2), "the first claim checked")
	require.LessOrEqual(t, fake.infos.Load(), 2+int64(time.Since(start)/time.Second), "once a second at most")

	require.Eventually(t, func() bool { claimOnce(t, s); return fake.infos.Load() >= 3 }, 3*time.Second, 20*time.Millisecond,
		"a failed attempt does not end the retries")
	fake.refuseInfo.Store(false)
	require.Eventually(t, func() bool {
		claimOnce(t, s)
		return logs.has("jobonce: redisstore: the check New could not make has run")
	}, 3*time.Second, 20*time.Millisecond)
	ran := fake.infos.Load()
	for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline); {
		claimOnce(t, s)
	}
	require.Equal(t, ran, fake.infos.Load(), "once it ran, no claim checks again")
}

// The reproduction with a real server: New's check and the first claim
// fail (the server is down), the server comes up, and a claim soon after
// makes the check, which reports the server's risk.
func TestWithoutPeriodicChecksAClaimChecksOnceTheServerIsUp(t *testing.T) {
	t.Parallel()
	server := testenv.StartRedisServer(t) // no AOF, no RDB save: a persistence risk
	addr := testenv.ClosedAddr(t)
	var logs records
	s, err := redisstore.New(startupClient(t, addr), &redisstore.Config{Logger: slog.New(&logs), CheckEvery: -1})
	require.NoError(t, err)
	requireCouldNotCheck(t, &logs, "connection refused")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = s.Claim(ctx, driver.ClaimRequest{Key: "startup:down", Token: driver.NewToken(), Lease: time.Minute})
	require.Error(t, err, "the server is down")

	testenv.StartProxy(t, addr, server.Addr) // the server comes up
	require.Eventually(t, func() bool { claimOnce(t, s); return len(logs.events()) > 0 }, 3*time.Second, 20*time.Millisecond)
	require.Equal(t, []string{"persistence"}, logs.events(), "a claim checked")
}

// The risks a server has now are a gauge, jobonce.redis.risks by event,
// which falls back to 0 once the setting is fixed, while the events that
// counted them stay counted.
func TestWatchRisksFollowTheSettings(t *testing.T) {
	server := testenv.StartRedisServer(t, "--maxmemory-policy", "allkeys-lru")
	w := newWatched(t, server.Client())
	require.Equal(t, map[string]int64{"eviction": 1, "persistence": 1}, w.sum(t, "jobonce.redis.risks"))
	ctx := context.Background()
	require.NoError(t, server.Client().ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	w.claim(t)
	require.Equal(t, map[string]int64{"eviction": 0, "persistence": 1}, w.sum(t, "jobonce.redis.risks"))
	require.NoError(t, server.Client().ConfigSet(ctx, "appendonly", "yes").Err())
	w.claim(t)
	require.Equal(t, map[string]int64{"eviction": 0, "persistence": 0}, w.sum(t, "jobonce.redis.risks"))
	require.Equal(t, map[string]int64{"eviction": 1, "persistence": 1}, w.counts(t))
}
