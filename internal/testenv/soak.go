package testenv

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
)

// SoakDuration returns how long a soak test runs, from JOBONCE_SOAK (a
// duration such as 8m), and skips the test when it is unset: soaks run on
// request, not in the default suite.
func SoakDuration(t testing.TB) time.Duration {
	t.Helper()
	v := os.Getenv("JOBONCE_SOAK")
	if v == "" {
		t.Skip("a soak: set JOBONCE_SOAK (such as 8m) to run it")
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("JOBONCE_SOAK: %v", err)
	}
	return d
}

// SignalSoak runs jobs whose copies wait for them through the completion
// signal, on Guards sharing a store, while faults break the store's
// connections.
type SignalSoak struct {
	Store  driver.Notifier
	Prefix string
	Guards int // sharing Store, as processes do
	Jobs   int // running at once, each with one to four copies waiting
	// Faults are applied in turn, one every FaultEvery, from the test's
	// goroutine.
	Faults     []Fault
	FaultEvery time.Duration
	// Conns returns how many connections of the test's clients the store's
	// server holds, and how many of them are Listeners'.
	Conns func(ctx context.Context) (all, listeners int, err error)
}

// Fault is one fault of a soak.
type Fault struct {
	Name  string
	Apply func()
}

// settle is one waiting copy's answer.
type settle struct {
	at  time.Time     // when it returned
	lag time.Duration // after its job's Run returned, for a Duplicate
	out core.Outcome
}

// sample is the soak's state at one moment.
type sample struct {
	at                           time.Time
	goroutines, conns, listeners int
}

// signalled is the lag under which a copy was woken by the signal: a copy
// not woken reads its key a second after it began to wait, and the jobs
// run 200ms at most.
const signalled = 100 * time.Millisecond

// RunSignalSoak runs s for d and fails the test when the goroutines or the
// connections grow, when the signal does not come back after a fault (no
// copy woken by it between two faults), or when goroutines or connections
// are left once the Guards are closed. It reports the figures.
func RunSignalSoak(t *testing.T, d time.Duration, s SignalSoak) {
	ctx := context.Background()
	baseGoroutines := runtime.NumGoroutine()
	baseConns, _, err := s.Conns(ctx)
	if err != nil {
		t.Fatal(err)
	}
	guards := make([]*core.Guard, s.Guards)
	for i := range guards {
		g, err := core.New(s.Store, &core.Config{KeyPrefix: s.Prefix, PlainKeys: true, Lease: 5 * time.Second,
			StoreTimeout: 2 * time.Second, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		guards[i] = g
	}

	var mu sync.Mutex
	var settles []settle
	outcomes := map[string]int{}
	var next atomic.Int64
	start := time.Now()
	end := start.Add(d)
	var jobs sync.WaitGroup
	for w := range s.Jobs {
		jobs.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(start.UnixNano())))
			for time.Now().Before(end) {
				key := "soak-" + strconv.FormatInt(next.Add(1), 10)
				started := make(chan struct{})
				var holderDone time.Time
				held := make(chan struct{})
				holder, work := guards[rng.IntN(len(guards))], time.Duration(20+rng.IntN(180))*time.Millisecond
				go func() {
					defer close(held)
					res, _ := holder.Run(ctx, core.Job{Key: key}, func(context.Context) ([]byte, error) {
						close(started)
						time.Sleep(work) // the job's work
						return nil, nil
					})
					holderDone = time.Now()
					mu.Lock()
					outcomes["job "+res.Outcome.String()]++
					mu.Unlock()
				}()
				select {
				case <-started:
				case <-held:
					continue // it did not run: the store was down
				}
				var copies sync.WaitGroup
				results := make([]core.Result, 1+rng.IntN(4))
				returned := make([]time.Time, len(results))
				for i := range results {
					g := guards[rng.IntN(len(guards))]
					copies.Go(func() {
						results[i], _ = g.Run(ctx, core.Job{Key: key, WaitUntil: time.Now().Add(5 * time.Second), HoldsWorker: true},
							func(context.Context) ([]byte, error) { return nil, nil })
						returned[i] = time.Now()
					})
				}
				copies.Wait()
				<-held
				mu.Lock()
				for i, res := range results {
					outcomes["copy "+res.Outcome.String()]++
					if res.Outcome == core.Duplicate {
						settles = append(settles, settle{at: returned[i], lag: returned[i].Sub(holderDone), out: res.Outcome})
					}
				}
				mu.Unlock()
			}
		})
	}

	var samples []sample
	take := func() {
		n, l, err := s.Conns(ctx)
		if err != nil {
			n, l = -1, -1
		}
		samples = append(samples, sample{at: time.Now(), goroutines: runtime.NumGoroutine(), conns: n, listeners: l})
	}
	type applied struct {
		name string
		at   time.Time
	}
	faults := []applied{{"start", start}}
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	nextFault := start.Add(s.FaultEvery)
	for i := 0; time.Now().Before(end); {
		select {
		case <-tick.C:
			take()
		case <-time.After(time.Until(nextFault)):
			if !nextFault.Before(end.Add(-s.FaultEvery / 2)) {
				nextFault = end.Add(time.Hour)
				continue
			}
			f := s.Faults[i%len(s.Faults)]
			f.Apply()
			faults = append(faults, applied{f.Name, time.Now()})
			i++
			nextFault = nextFault.Add(s.FaultEvery)
		case <-time.After(time.Until(end)):
		}
	}
	jobs.Wait()
	take()

	// The signal came back after each fault: a copy settled by it.
	var slow int
	for _, st := range settles {
		if st.lag >= signalled {
			slow++
		}
	}
	lags := make([]time.Duration, len(settles))
	for i, st := range settles {
		lags[i] = st.lag
	}
	slices.Sort(lags)
	q := func(p float64) time.Duration {
		if len(lags) == 0 {
			return 0
		}
		return lags[int(p*float64(len(lags)-1))].Round(10 * time.Microsecond)
	}
	Report(t, "%s: %d waiting copies settled as duplicates, %d of them not by the signal (%d ms or more); lag p50 %s, p99 %s, max %s; outcomes %v",
		d, len(settles), slow, signalled.Milliseconds(), q(0.5), q(0.99), q(1), outcomes)
	for i, f := range faults {
		until := end
		if i+1 < len(faults) {
			until = faults[i+1].at
		}
		first, woken, n := time.Duration(-1), 0, 0
		for _, st := range settles {
			if st.at.Before(f.at) || !st.at.Before(until) {
				continue
			}
			n++
			if st.lag < signalled {
				woken++
				if first < 0 || st.at.Sub(f.at) < first {
					first = st.at.Sub(f.at)
				}
			}
		}
		t.Logf("after %s at +%s: %d copies settled, %d by the signal, the first %s after", f.name, f.at.Sub(start).Round(time.Second), n, woken, first.Round(time.Millisecond))
		if woken == 0 {
			t.Errorf("the signal did not come back after %s at +%s: none of %d copies was woken by it", f.name, f.at.Sub(start).Round(time.Second), n)
		}
	}

	// Neither goroutines nor connections grow: the last third's most is
	// within a margin of the first third's.
	third := len(samples) / 3
	most := func(ss []sample, f func(sample) int) int {
		m := 0
		for _, x := range ss {
			m = max(m, f(x))
		}
		return m
	}
	gor := func(x sample) int { return x.goroutines }
	con := func(x sample) int { return x.conns }
	var trail []string
	for _, x := range samples {
		trail = append(trail, fmt.Sprintf("+%s %d/%d/%d", x.at.Sub(start).Round(time.Second), x.goroutines, x.conns, x.listeners))
	}
	t.Logf("goroutines/connections/Listeners' connections every 5s: %v", trail)
	if third > 0 {
		early, late := samples[:third], samples[len(samples)-third:]
		Report(t, "goroutines: at most %d in the first third, %d in the last; connections: %d, %d (before: %d goroutines, %d connections)",
			most(early, gor), most(late, gor), most(early, con), most(late, con), baseGoroutines, baseConns)
		if most(late, gor) > most(early, gor)+s.Jobs*10 {
			t.Errorf("goroutines grew: at most %d in the first third, %d in the last", most(early, gor), most(late, gor))
		}
		if most(late, con) > most(early, con)+s.Guards {
			t.Errorf("connections grew: at most %d in the first third, %d in the last", most(early, con), most(late, con))
		}
		lis := func(x sample) int { return x.listeners }
		if most(samples, lis) > s.Guards {
			t.Errorf("%d Listeners' connections at once, for %d Guards", most(samples, lis), s.Guards)
		}
	}

	for _, g := range guards {
		if err := g.Close(); err != nil {
			t.Errorf("Guard.Close: %v", err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > baseGoroutines+2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > baseGoroutines+2 {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines left once the Guards closed, %d before:\n%s", n, baseGoroutines, buf[:runtime.Stack(buf, true)])
	}
	for {
		_, l, err := s.Conns(ctx)
		if err == nil && l == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%d Listeners' connections left once the Guards closed", l)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
}
