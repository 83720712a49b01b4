package riveronce

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/pgstore"
	"github.com/jobonce/jobonce/internal/pgtest"
	"github.com/jobonce/jobonce/internal/testenv"
)

// waitVariant is one waiting policy for BenchmarkWaitingCopies, with what
// its turns cost.
type waitVariant struct {
	name   string
	pool   *pgxpool.Pool
	schema string
	mw     []rivertype.Middleware
	events waitEvents

	spent time.Duration
	turns int
}

// waitEvents keeps what a Guard's Observer saw: when each key's job ran,
// each duplicate settled and whether it had waited, the time copies spent
// waiting, and how many copies were snoozed, for a second or more (long).
type waitEvents struct {
	mu      sync.Mutex
	ran     map[string]time.Time
	dups    []settled
	waited  time.Duration
	running int
	long    int
}

type settled struct {
	key    string
	at     time.Time
	waited bool
}

func (w *waitEvents) Observe(_ context.Context, e core.Event) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.waited += e.Waited
	switch e.Outcome {
	case core.Ran:
		w.ran[e.Key] = now
	case core.Duplicate:
		w.dups = append(w.dups, settled{key: e.Key, at: now, waited: e.Waited > 0})
	case core.Running:
		w.running++
		if hint, _ := core.RetryAfter(e.Err); hint >= time.Second {
			w.long++
		}
	}
}

func (w *waitEvents) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ran, w.dups, w.waited, w.running, w.long = make(map[string]time.Time), nil, 0, 0, 0
}

// settles returns how long after its job ran each duplicate settled, for
// every duplicate and for those that had waited, sorted.
func (w *waitEvents) settles() (all, waiters []time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, d := range w.dups {
		if ran, ok := w.ran[d.key]; ok {
			s := max(0, d.at.Sub(ran))
			all = append(all, s)
			if d.waited {
				waiters = append(waiters, s)
			}
		}
	}
	slices.Sort(all)
	slices.Sort(waiters)
	return all, waiters
}

// BenchmarkWaitingCopies measures what copies that find their job running
// cost a River client (MaxWorkers 100, FetchCooldown 1ms,
// FetchPollInterval 50ms, a pool of 16 connections) with the middleware on
// a Guard on PostgreSQL (pgstore) and on Redis: each turn inserts 200
// distinct 200ms jobs, each 5 times side by side, and a new client works
// them, timed from its start until every copy completed. The variants take
// turns in an order that rotates each round: "wait" (the defaults:
// WaitRunning 5s, WaitingShare 0.25), "no-wait" (WaitRunning -1: every
// copy snoozes) and "share-1" (WaitingShare 1: one copy of each key waits,
// whatever the pool). Each Guard first runs 10 jobs of the kind, outside
// the timer, so that it knows how long they take (the RetryAfter hint).
// Per variant it reports the time to finish a turn (finish-s), the worker
// time copies spent waiting per turn (waited-s: core.Event.Waited summed),
// the snoozes per job, the snoozes of a second or more per turn (a hint
// from the running claim's lease rather than its expected end), how long
// after its job ran a duplicate settled (settle-p50-ms, settle-p99-ms: from
// the first copy's Ran to the copy's Duplicate) and the same for the
// duplicates that had waited (waiter-settle-…); and the ratios of finish-s
// wait/no-wait and share-1/no-wait. Run:
//
//	go test -run '^$' -bench WaitingCopies -benchtime 600x -count 6 ./adapters/river
func BenchmarkWaitingCopies(b *testing.B) {
	for _, store := range []string{"postgres", "redis"} {
		b.Run(store, func(b *testing.B) { benchWaitingCopies(b, store) })
	}
}

func benchWaitingCopies(b *testing.B, store string) {
	b.ReportAllocs()
	b.StopTimer()
	ctx := context.Background()
	var variants []*waitVariant
	for _, name := range []string{"wait", "no-wait", "share-1"} {
		v := &waitVariant{name: name}
		v.events.reset()
		_, v.schema = riverSchema(b)
		v.pool = pgtest.PostgresOn(b, v.schema, 16)
		cfg := &core.Config{Observer: v.events.Observe}
		if name == "share-1" {
			cfg.WaitingShare = 1
		}
		var g *core.Guard
		if store == "redis" {
			g = testenv.RedisGuard(b, cfg)
		} else {
			s, err := pgstore.New(ctx, v.pool, &pgstore.Config{Migrate: true})
			require.NoError(b, err)
			g = testenv.NewGuard(b, s, cfg)
		}
		var mwCfg *Config
		if name == "no-wait" {
			mwCfg = &Config{WaitRunning: -1}
		}
		v.mw = []rivertype.Middleware{MustMiddleware(g, mwCfg)}
		v.turn(b, -10, 10, 1) // the Guard learns how long the kind runs
		v.events.reset()
		v.spent, v.turns = 0, 0
		variants = append(variants, v)
	}
	b.StartTimer()
	const chunk, copies = 200, 5
	for done, round := 0, 0; done < b.N; done, round = done+chunk, round+1 {
		n := min(chunk, b.N-done)
		for j := range variants {
			variants[(j+round)%len(variants)].turn(b, done, n, copies)
		}
	}
	b.StopTimer()
	finish := make(map[string]float64)
	for _, v := range variants {
		finish[v.name] = v.spent.Seconds() / float64(v.turns)
		b.ReportMetric(finish[v.name], v.name+"-finish-s")
		v.events.mu.Lock()
		b.ReportMetric(v.events.waited.Seconds()/float64(v.turns), v.name+"-waited-s")
		b.ReportMetric(float64(v.events.running)/float64(b.N), v.name+"-snoozes/job")
		b.ReportMetric(float64(v.events.long)/float64(v.turns), v.name+"-long-snoozes/turn")
		v.events.mu.Unlock()
		all, waiters := v.events.settles()
		reportQuantiles(b, v.name+"-settle", all)
		reportQuantiles(b, v.name+"-waiter-settle", waiters)
	}
	b.ReportMetric(finish["wait"]/finish["no-wait"], "wait/no-wait")
	b.ReportMetric(finish["share-1"]/finish["no-wait"], "share-1/no-wait")
}

// turn inserts copies of each of n 200ms jobs numbered from first, outside
// the timer, and works them with a new client, timed until every copy
// completed.
func (v *waitVariant) turn(b *testing.B, first, n, copies int) {
	b.StopTimer()
	ctx := context.Background()
	params := make([]river.InsertManyParams, 0, n*copies)
	for i := first; i < first+n; i++ {
		for range copies {
			params = append(params, river.InsertManyParams{Args: settleArgs{N: i}})
		}
	}
	_, err := insertClient(b, v.pool, v.schema).InsertManyFast(ctx, params)
	require.NoError(b, err)
	workers := river.NewWorkers()
	river.AddWorker(workers, settleWorker{})
	cfg := clientConfig(v.schema, workers, 100)
	cfg.FetchCooldown = time.Millisecond
	cfg.Middleware = v.mw
	client, err := river.NewClient(riverDriver(v.pool), cfg)
	require.NoError(b, err)
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: len(params) + 1000, Kinds: []river.EventKind{river.EventKindJobCompleted},
	})
	defer cancel()
	deadline := time.NewTimer(5 * time.Minute)
	defer deadline.Stop()
	b.StartTimer()
	start := time.Now()
	require.NoError(b, client.Start(ctx))
	for range params {
		select {
		case <-events:
		case <-deadline.C:
			b.Fatalf("%s: jobs not completed within 5 minutes", v.name)
		}
	}
	v.spent += time.Since(start)
	v.turns++
	b.StopTimer()
	stop, cancelStop := context.WithTimeout(ctx, 10*time.Second)
	defer cancelStop()
	require.NoError(b, client.Stop(stop))
	b.StartTimer()
}

// reportQuantiles reports the median and 99th percentile of sorted, in
// milliseconds, as name-p50-ms and name-p99-ms; nothing when it is empty.
func reportQuantiles(b *testing.B, name string, sorted []time.Duration) {
	if len(sorted) == 0 {
		return
	}
	q := func(p float64) float64 {
		return float64(sorted[int(p*float64(len(sorted)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(q(0.50), name+"-p50-ms")
	b.ReportMetric(q(0.99), name+"-p99-ms")
}
