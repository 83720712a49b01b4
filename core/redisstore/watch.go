package redisstore

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/jobonce/jobonce/internal/redisops"
)

// Events the watch reports (the event attribute of jobonce.redis.events).
const (
	eventRestart  = "restart"  // the server we write to restarted
	eventFailover = "failover" // we write to another primary, or ours was promoted
)

// watch reads the servers' state at New and then once per period, within
// one of the Store's own calls (no goroutine of its own), and reports each
// change that makes duplicates possible once: a restart, a failover, a
// setting that can lose done markers (Risks of kind eviction or
// persistence). It holds no state a caller waits for: a check that fails
// is skipped until the next period, but for the check at New, which the
// first claim makes again, and the claims after it until one succeeds, once
// per retryEvery at most.
type watch struct {
	every   time.Duration
	next    atomic.Int64 // UnixNano of the next check
	again   atomic.Bool  // the check at New has not run: a claim makes it
	againAt atomic.Int64 // UnixNano before which no claim makes it
	logger  *slog.Logger
	events  metric.Int64Counter
	// risksNow counts, by kind, the servers that have a risk now: up when
	// a check finds it, down when a later one no longer does.
	risksNow metric.Int64UpDownCounter

	latest atomic.Pointer[[]redisops.ServerInfo] // the servers as the last check that succeeded read them

	mu    sync.Mutex                     // one check at a time; guards what follows
	last  map[string]redisops.ServerInfo // by address; nil before the first check
	risks map[string]redisops.Risk       // address and kind → the risk, while it lasts
}

func newWatch(every time.Duration, logger *slog.Logger, mp metric.MeterProvider) (*watch, error) {
	meter := mp.Meter("github.com/jobonce/jobonce/core/redisstore")
	events, err := meter.Int64Counter("jobonce.redis.events",
		metric.WithDescription("Changes of the Redis servers that let duplicates run: restart, failover, eviction, persistence"))
	if err != nil {
		return nil, err
	}
	risksNow, err := meter.Int64UpDownCounter("jobonce.redis.risks", metric.WithUnit("{server}"),
		metric.WithDescription("Redis servers whose settings can lose done markers now, as the latest check read them, by event: eviction, persistence"))
	if err != nil {
		return nil, err
	}
	w := &watch{every: every, logger: logger, events: events, risksNow: risksNow, risks: map[string]redisops.Risk{}}
	for _, kind := range []redisops.RiskKind{redisops.RiskEviction, redisops.RiskPersistence} {
		w.risksNow.Add(context.Background(), 0, riskAttr(kind)) // 0 until a check finds one
	}
	return w, nil
}

// due reports whether a check is due now, and if so books it, so that one
// caller per period checks. retry is true for the check at New made again.
func (w *watch) due() (due, retry bool) {
	if w == nil {
		return false, false
	}
	if w.again.Load() && time.Now().UnixNano() >= w.againAt.Load() && w.again.CompareAndSwap(true, false) {
		return true, true
	}
	if w.every <= 0 {
		return false, false
	}
	now := time.Now().UnixNano()
	next := w.next.Load()
	return now >= next && w.next.CompareAndSwap(next, now+int64(w.every)), false
}

// retryEvery is how often at most claims make the check at New again
// while it fails: a server that does not answer costs one claim per
// retryEvery the wait for it (checkTimeout at most).
const retryEvery = time.Second

// checkLater books the check at New for a later claim: the next one, or
// after failed (an attempt that could not read the servers), the first one
// after retryEvery.
func (w *watch) checkLater(failed bool) {
	if failed {
		w.againAt.Store(time.Now().Add(retryEvery).UnixNano())
	}
	w.again.Store(true)
}

// errChecking is check's error while another call is checking.
var errChecking = errors.New("jobonce: redisstore: another call is checking the servers")

// check reads the servers and reports what changed since the last check. Its
// error says why it could not read them (errChecking: another call is
// checking); it reported nothing then.
func (w *watch) check(ctx context.Context, client redis.UniversalClient) error {
	if !w.mu.TryLock() {
		return errChecking
	}
	defer w.mu.Unlock()
	infos, err := redisops.ReadServerInfo(ctx, client)
	if err != nil {
		return err
	}
	now := make(map[string]redisops.ServerInfo, len(infos))
	for _, info := range infos {
		now[info.Addr] = info
		prev, known := w.last[info.Addr]
		switch {
		case w.last == nil:
		case known && prev.RunID != info.RunID:
			persisted := info.AppendOnly || info.SaveConfigured || !info.ConfigKnown
			msg := "jobonce: Redis restarted: the claims and done markers it had not saved are lost, so duplicates can run"
			if !persisted {
				msg = "jobonce: Redis restarted without persistence: every claim and done marker is lost, so duplicates can run"
			}
			w.report(ctx, eventRestart, msg, info)
		case known && prev.ReplID != info.ReplID && info.Role == "master":
			w.report(ctx, eventFailover, "jobonce: Redis was promoted to primary: the writes its old primary had not replicated are lost, so duplicates can run", info)
		case !known:
			w.report(ctx, eventFailover, "jobonce: Redis primary changed: the writes the old primary had not replicated are lost, so duplicates can run", info)
		}
		w.compareRisks(ctx, info)
	}
	for id, r := range w.risks { // a server no longer read (a Cluster's primary gone) has no risk now
		if _, read := now[strings.TrimSuffix(id, " "+string(r.Kind))]; !read {
			delete(w.risks, id)
			w.risksNow.Add(ctx, -1, riskAttr(r.Kind))
		}
	}
	w.last = now
	w.latest.Store(&infos)
	return nil
}

// compareRisks reports the risks of kind eviction and persistence that
// appeared on info's server since the last check, and those that ended.
// (A replication risk, a primary without replicas, is a deployment's
// choice; jobonce check reports it.)
func (w *watch) compareRisks(ctx context.Context, info redisops.ServerInfo) {
	seen := map[redisops.RiskKind]bool{}
	for _, r := range info.Risks(0) {
		if r.Kind == redisops.RiskReplication {
			continue
		}
		seen[r.Kind] = true
		id := info.Addr + " " + string(r.Kind)
		if _, ok := w.risks[id]; !ok {
			w.risks[id] = r
			w.risksNow.Add(ctx, 1, riskAttr(r.Kind))
			w.report(ctx, string(r.Kind), "jobonce: "+r.Detail, info)
		}
	}
	for _, kind := range []redisops.RiskKind{redisops.RiskEviction, redisops.RiskPersistence} {
		id := info.Addr + " " + string(kind)
		if _, ok := w.risks[id]; ok && !seen[kind] {
			delete(w.risks, id)
			w.risksNow.Add(ctx, -1, riskAttr(kind))
			w.logger.InfoContext(ctx, "jobonce: Redis no longer reports a risk", "risk", string(kind), "addr", info.Addr)
		}
	}
}

// riskAttr is the attribute set of jobonce.redis.risks for kind.
func riskAttr(kind redisops.RiskKind) metric.AddOption {
	return metric.WithAttributes(attribute.String("event", string(kind)))
}

func (w *watch) report(ctx context.Context, event, msg string, info redisops.ServerInfo) {
	w.logger.WarnContext(ctx, msg, "event", event, "addr", info.Addr, "role", info.Role,
		"maxmemory-policy", info.MaxmemoryPolicy, "appendonly", info.AppendOnly, "uptime", info.Uptime)
	w.events.Add(ctx, 1, metric.WithAttributes(attribute.String("event", event)))
}
