package monitoring_test

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/testenv"
)

// TestEachAlertFiresOnARealPrometheus: a worker exports its metrics over
// HTTP, a Prometheus of the test's own scrapes it every second and
// evaluates the rules of prometheus/jobonce.rules.yml (with for: 3s in
// place of 5m), and each condition the rules watch is made for real, in
// turn: each alert fires, seen through Prometheus' HTTP API. Then every
// query of the Grafana dashboard returns data.
func TestEachAlertFiresOnARealPrometheus(t *testing.T) {
	tool(t, "prometheus")
	// A Redis without persistence, whose policy evicts: two risks.
	rs := testenv.StartRedisServer(t, "--maxmemory-policy", "allkeys-lru")
	w := startWorker(t, rs.Addr)
	rules, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	fast := filepath.Join(t.TempDir(), "jobonce.rules.yml")
	writeFile(t, fast, shortFor(string(rules), 3*time.Second))
	prom := startPrometheus(t, w.addr, fast, time.Second)
	until(t, "prometheus scrapes the worker", time.Minute, func() bool {
		return len(prom.query(t, `up{job="worker"} == 1`)) == 1
	})
	stopTraffic := w.traffic()
	defer stopTraffic()
	ctx := context.Background()
	nop := func(context.Context) ([]byte, error) { return nil, nil }
	e2e := map[string]string{"jobonce_consumer": "e2e"}

	// Two payloads under one key.
	_, err = w.guard.Run(ctx, core.Job{Key: "charge-7", Kind: "charge", Fingerprint: "a"}, nop)
	require.NoError(t, err)
	res, _ := w.guard.Run(ctx, core.Job{Key: "charge-7", Kind: "charge", Fingerprint: "b"}, nop)
	require.Equal(t, core.Conflict, res.Outcome)

	// A delivery whose key is empty.
	res, _ = w.guard.Run(ctx, core.Job{Kind: "import"}, nop)
	require.Equal(t, core.Rejected, res.Outcome)

	// A job that outlives its unrenewed claim: its marker finds the key gone.
	out, err := w.lapsing.Do(ctx, "slow", func(ctx context.Context) error {
		key, err := w.lapsing.StoredKey("slow")
		if err != nil {
			return err
		}
		until(t, "the claim lapses", 30*time.Second, func() bool { return w.client.Exists(ctx, key).Val() == 0 })
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, core.LeaseLost, out)

	// Shadow mode runs a duplicate.
	for range 2 {
		_, err := w.shadow.Do(ctx, "shadowed", func(context.Context) error { return nil })
		require.NoError(t, err)
	}

	// Copies that wait for their running copy, twice, a scrape apart.
	for i, key := range []string{"awaited-1", "awaited-2"} {
		release, first := blocked(t, w.guard, key)
		waited := make(chan core.Outcome, 1)
		go func() {
			res, _ := w.guard.Run(ctx, core.Job{Key: key, WaitUntil: time.Now().Add(time.Minute)}, nop)
			waited <- res.Outcome
		}()
		until(t, "the claim is held and the copy waits", time.Minute, func() bool {
			return len(prom.query(t, `sum(jobonce_claims_held{jobonce_consumer="e2e"}) > 0 and sum(jobonce_copies_waiting{jobonce_consumer="e2e"}) > 0`)) > 0
		})
		release()
		require.Equal(t, core.Ran, <-first)
		require.Equal(t, core.Duplicate, <-waited)
		until(t, "the wait is scraped", time.Minute, func() bool {
			return len(prom.query(t, `sum(jobonce_wait_duration_seconds_count{jobonce_consumer="e2e"}) > `+strconv.Itoa(i))) > 0
		})
	}
	prom.waitFiring(t, "JobonceConflicts", map[string]string{"jobonce_consumer": "e2e", "jobonce_kind": "charge"})
	prom.waitFiring(t, "JobonceRejected", map[string]string{"jobonce_consumer": "e2e", "jobonce_kind": "import"})
	prom.waitFiring(t, "JobonceLeaseLost", map[string]string{"jobonce_consumer": "e2e-lapsing"})
	prom.waitFiring(t, "JobonceRedisRisk", map[string]string{"event": "persistence"})
	prom.waitFiring(t, "JobonceRedisRisk", map[string]string{"event": "eviction"})
	// The policy fixed, the eviction risk's alert resolves at the store's
	// next check; the persistence risk's goes on.
	require.NoError(t, rs.Client().ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	until(t, "JobonceRedisRisk resolves for eviction", 90*time.Second, func() bool {
		return len(prom.firing(t, "JobonceRedisRisk", map[string]string{"event": "eviction"})) == 0
	})
	require.NotEmpty(t, prom.firing(t, "JobonceRedisRisk", map[string]string{"event": "persistence"}))

	// A duplicate more than half a Retention late: its first copy now,
	// the duplicate once the holder below is gone.
	lagged := time.Now()
	_, err = w.guard.Run(ctx, core.Job{Key: "lagged-0", Kind: "report"}, nop)
	require.NoError(t, err)

	// A worker SIGKILLed while it holds a claim: a copy waits for the
	// claim, sees it lapse unrenewed, and takes the key over.
	holder := startHolder(t, rs.Addr, "held")
	require.NoError(t, holder.Process.Kill())
	_ = holder.Wait()
	res, err = w.guard.Run(ctx, core.Job{Key: "held", Kind: "report", WaitUntil: time.Now().Add(4 * lease)}, nop)
	require.NoError(t, err)
	require.Equal(t, core.Ran, res.Outcome)
	prom.waitFiring(t, "JobonceStaleClaims", map[string]string{"jobonce_consumer": "e2e", "jobonce_kind": "report"})

	// The duplicate, more than half a Retention after its first copy (the
	// delay of a redelivery). A copy that came after Retention on a slow
	// machine ran again: once more, on its own.
	for i := 0; ; i++ {
		time.Sleep(time.Until(lagged.Add(retention * 6 / 10)))
		key := "lagged-" + strconv.Itoa(i)
		res, err = w.guard.Run(ctx, core.Job{Key: key, Kind: "report"}, nop)
		require.NoError(t, err)
		if res.Outcome == core.Duplicate || i == 1 {
			require.Equal(t, core.Duplicate, res.Outcome, "the lagged copy came within Retention (%s)", retention)
			break
		}
		lagged = time.Now()
		_, err = w.guard.Run(ctx, core.Job{Key: "lagged-" + strconv.Itoa(i+1), Kind: "report"}, nop)
		require.NoError(t, err)
	}
	prom.waitFiring(t, "JobonceDuplicateLagNearRetention", e2e)

	// Redis goes away while a job runs: its marker cannot be written, and
	// every delivery fails closed.
	release, done := blocked(t, w.guard, "during-outage")
	rs.Kill()
	release()
	require.Equal(t, core.Unrecorded, <-done)
	prom.waitFiring(t, "JobonceUnrecorded", e2e)
	prom.waitFiring(t, "JobonceStoreUnavailable", e2e)
	// Under FailOpen, a job runs unguarded instead.
	res, err = w.failOpen.Run(ctx, core.Job{Key: "unguarded", Kind: "report"}, nop)
	require.NoError(t, err)
	require.Equal(t, core.Unguarded, res.Outcome)
	prom.waitFiring(t, "JobonceFailOpen", map[string]string{"jobonce_consumer": "e2e-failopen", "jobonce_kind": "report"})

	// It comes back, restarted: the store's watch sees a new run_id.
	rs.Restart()
	prom.waitFiring(t, "JobonceRedisFailover", map[string]string{"event": "restart"})

	require.Equal(t, 10, strings.Count(string(rules), "- alert: "), "this test makes each of the rules' 10 alerts fire")

	everyPanelHasData(t, prom)
}

// everyPanelHasData checks that each query of each panel of the Grafana
// dashboard, its variables set to all values, returns at least one series
// with a number.
func everyPanelHasData(t *testing.T, prom *prometheus) {
	t.Helper()
	raw, err := os.ReadFile("grafana/jobonce.json")
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	require.NotEmpty(t, dash.Panels)
	vars := strings.NewReplacer("$__rate_interval", "5m", "$job", ".*", "$consumer", ".*")
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, target := range p.Targets {
			q := vars.Replace(target.Expr)
			if strings.Contains(q, "$") {
				t.Errorf("panel %q: a variable the test does not know: %s", p.Title, q)
				continue
			}
			samples := prom.query(t, q)
			numbers := 0
			for _, s := range samples {
				if !math.IsNaN(s.Value) {
					numbers++
				}
			}
			if numbers == 0 {
				t.Errorf("panel %q: no data from %s (%v)", p.Title, q, samples)
			}
		}
	}
}
