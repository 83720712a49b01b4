package testenv

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
)

// Storm is a storm of waiters: Copies copies of one job, each waiting for
// the running copy (core.Job.WaitUntil), arriving one after another at a
// random spacing within Apart, spread over Guards Guards that share the
// store (as the consumers of many processes), while the job runs for Hold
// from the first copy's arrival.
type Storm struct {
	Copies int
	Guards int
	Apart  [2]time.Duration
	Hold   time.Duration
}

// StormResult is what a storm cost the store and how its copies settled.
type StormResult struct {
	Reads    []int          // the Await calls of each copy: its reads of the key
	Outcomes map[string]int // the copies' outcomes
	Settled  []time.Duration
	// Settled holds, sorted, how long after the running copy's done
	// marker was sent each copy that ended Duplicate returned.
	Elapsed time.Duration // from the first copy's arrival to the last one's answer
}

// Total returns the copies' reads of the key.
func (r StormResult) Total() int {
	n := 0
	for _, c := range r.Reads {
		n += c
	}
	return n
}

// Most returns the most reads of one copy.
func (r StormResult) Most() int { return slices.Max(r.Reads) }

// Quantile returns the q quantile of Settled, zero when empty.
func (r StormResult) Quantile(q float64) time.Duration {
	if len(r.Settled) == 0 {
		return 0
	}
	return r.Settled[int(q*float64(len(r.Settled)-1))]
}

// RunStorm runs storm s on store, under key prefix prefix: the running
// copy's claim is made on store directly, and written done after s.Hold.
func RunStorm(t testing.TB, store driver.Notifier, prefix string, s Storm) StormResult {
	t.Helper()
	reads := &copyAwaits{Notifier: store, n: make([]int, s.Copies)}
	guards := make([]*core.Guard, s.Guards)
	for i := range guards {
		g, err := core.New(reads, &core.Config{KeyPrefix: prefix, PlainKeys: true, Lease: time.Minute,
			Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		if c, ok := any(g).(interface{ Close() error }); ok {
			t.Cleanup(func() { _ = c.Close() })
		}
		guards[i] = g
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.Hold+time.Minute)
	defer cancel()
	key := prefix + "storm"
	holder := driver.NewToken()
	r, err := store.Claim(ctx, driver.ClaimRequest{Key: key, Token: holder, Lease: time.Minute})
	if err != nil || r.State != driver.StateClaimed {
		t.Fatalf("testenv: the running copy's claim: %v, %v", r.State, err)
	}

	res := StormResult{Reads: reads.n, Outcomes: make(map[string]int)}
	outcomes := make([]core.Outcome, s.Copies)
	returned := make([]time.Time, s.Copies)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range s.Copies {
		wg.Go(func() {
			ctx := context.WithValue(ctx, copyKey{}, i)
			out, _ := guards[i%s.Guards].Run(ctx, core.Job{Key: "storm", WaitUntil: start.Add(s.Hold + 10*time.Second), HoldsWorker: true},
				func(context.Context) ([]byte, error) { return nil, nil })
			outcomes[i], returned[i] = out.Outcome, time.Now()
		})
		if i < s.Copies-1 {
			time.Sleep(s.Apart[0] + rand.N(s.Apart[1]-s.Apart[0]+1)) // the copies' arrivals, not a synchronisation
		}
	}
	time.Sleep(time.Until(start.Add(s.Hold))) // the running job's duration
	done := time.Now()
	if err := store.Complete(ctx, driver.CompleteRequest{Key: key, Token: holder, Retention: time.Minute, Fence: r.Fence}); err != nil {
		t.Fatalf("testenv: the running copy's done marker: %v", err)
	}
	wg.Wait()
	last := start
	for i, out := range outcomes {
		res.Outcomes[out.String()]++
		if out == core.Duplicate {
			res.Settled = append(res.Settled, returned[i].Sub(done))
		}
		if returned[i].After(last) {
			last = returned[i]
		}
	}
	slices.Sort(res.Settled)
	res.Elapsed = last.Sub(start)
	reads.mu.Lock()
	res.Reads = slices.Clone(reads.n)
	reads.mu.Unlock()
	return res
}

// copyAwaits counts each storm copy's Await calls, by its context.
type copyAwaits struct {
	driver.Notifier
	mu sync.Mutex
	n  []int
}

type copyKey struct{}

func (c *copyAwaits) Await(ctx context.Context, req driver.ClaimRequest) (driver.ClaimReply, error) {
	if i, ok := ctx.Value(copyKey{}).(int); ok {
		c.mu.Lock()
		c.n[i]++
		c.mu.Unlock()
	}
	return c.Notifier.Await(ctx, req)
}
