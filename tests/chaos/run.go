package chaos

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/internal/stall"
)

// Options configures Run.
type Options struct {
	// Store is the store under test. Run wraps it in a faulty store.
	Store driver.Store
	// Verify reaches the same data as Store, without faults or outages, for
	// the checks after each run. Defaults to Store.
	Verify driver.Store
	// KeyPrefix starts every key the runs write. Each run adds a part of
	// its own. Defaults to "jobonce-chaos:".
	KeyPrefix string
	// Duration is how long each mode runs, a quarter of it under -short.
	// JOBONCE_CHAOS_DURATION overrides it. Defaults to 2s.
	Duration time.Duration
	// Workers is the number of concurrent callers. Defaults to 48.
	Workers int
	// Keys is how many keys are hot at a time, so that copies collide.
	// Defaults to 12.
	Keys int
	// Cut, when set, breaks the store's connections, and Restore brings
	// them back. Run calls them from one goroutine at random moments
	// while the store is stormy. It calls Restore once at the end of each
	// run.
	Cut, Restore func()
	// Refusal returns the error the store gives when its server answers a
	// call with an error while reachable, such as Redis's OOM answer. The
	// faulty store then answers some calls with it, without running them.
	// FailOpen must fail closed on it. Defaults to nil: no such answers.
	Refusal func() error
	// Unreplicated tells that the store itself may answer ErrUnreplicated.
	// The faulty store then answers some done markers and extends it wrote
	// ErrUnreplicated too. It may answer a claim so on any store, after
	// releasing it, as the driver promises. Defaults to false.
	Unreplicated bool
	// Forget deletes a stored key outright. With Unreplicated, the faulty
	// store calls it after half of the done markers it answered
	// ErrUnreplicated, as a failover to a replica that missed them would.
	// It models only the loss of writes that were not acknowledged. A
	// failover that loses acknowledged writes breaks the Guard's promises
	// by design. Defaults to nil: no write is lost.
	Forget func(ctx context.Context, key string) error
}

// Run runs a randomized fault test of the Guard on opts.Store. Many
// callers deliver jobs on a few keys at once, with short leases and store
// timeouts. Callers cancel or time out at random, and jobs fail or panic.
// The store fails, hangs, panics and answers late at random. Run
// tracks what really ran outside the store. It fails the test on a breach
// of the Guard's invariants:
//
//  1. no job function runs while another copy of its key runs;
//  2. no key's effect happens twice unless a run of it was reported
//     LeaseLost or Unrecorded;
//  3. every Ran is durable: a later delivery is a Duplicate;
//  4. every call returns within its own context plus one bounded store call;
//  5. a call whose context ended before it was answered returns ctx.Err(),
//     not ErrStoreUnavailable, and does not run the job;
//  6. nothing is acknowledged unless its job ran or is done, and every
//     delivery's outcome is observed exactly once;
//  7. every outcome is true, held against the store's writes the faulty
//     store records (what each call that reached the store did, whether
//     or not its answer came back) and what the store holds at the end:
//     LeaseLost only when the claim had really lost the key and its marker
//     was never written, Ran only when this claim's marker is written and
//     is the durable one, Unrecorded only when no later attempt of the
//     marker was answered after it was written, Duplicate only when a
//     marker had been sent before the claim was answered; and the store
//     itself never adopts another claim's marker nor refuses a marker sent
//     again for the claim that wrote it;
//  8. FailOpen runs a job unguarded only on an outage, never on an answer
//     the store gave (Options.Refusal, ErrUnreplicated).
//
// A repeated effect (2) is excused only by a LeaseLost or Unrecorded that 7
// finds true.
//
// It runs five modes: Guard.Do with group commit, the Claim API (Claim,
// Work, Finish), Guard.Do without group commit, Guard.Do with FailOpen, and
// Wait. In Wait, half the deliveries wait for their running copies
// (Job.WaitUntil) through the store's completion signal. The faulty store
// loses, delays and makes up signals now and then; on a store that does
// not notify, the copies poll. The same invariants hold, a waiting call's
// bound grown by its wait.
//
// The test logs its seed. JOBONCE_CHAOS_SEED replays a run's settings and
// random choices, though goroutine scheduling still varies.
func Run(t *testing.T, opts Options) {
	if opts.Store == nil {
		t.Fatal("chaos: Options.Store is nil")
	}
	if opts.Verify == nil {
		opts.Verify = opts.Store
	}
	if opts.KeyPrefix == "" {
		opts.KeyPrefix = "jobonce-chaos:"
	}
	if opts.Duration <= 0 {
		opts.Duration = chaosScale * time.Second
	}
	if testing.Short() {
		opts.Duration /= 4
	}
	if s := os.Getenv("JOBONCE_CHAOS_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("JOBONCE_CHAOS_DURATION: %v", err)
		}
		opts.Duration = d
	}
	if opts.Workers <= 0 {
		opts.Workers = 48
	}
	if opts.Keys <= 0 {
		opts.Keys = 12
	}
	seed := chaosSeed(t)
	t.Logf("seed %d (replay with JOBONCE_CHAOS_SEED=%d)", seed, seed)
	modes := []chaosMode{
		{name: "Do"},
		{name: "Claim", claimAPI: true},
		{name: "Ungrouped", ungrouped: true},
		{name: "FailOpen", failOpen: true},
		{name: "Wait", claimAPI: true, wait: true},
	}
	for i, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			runChaos(t, opts, m, seed, seed^uint64(i+1)*0x9e3779b97f4a7c15)
		})
	}
}

func chaosSeed(t *testing.T) uint64 {
	if s := os.Getenv("JOBONCE_CHAOS_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("JOBONCE_CHAOS_SEED: %v", err)
		}
		return seed
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:]) >> 1
}

type chaosMode struct {
	name      string
	claimAPI  bool
	ungrouped bool
	failOpen  bool
	wait      bool // half the deliveries wait for their running copies
}

// chaosRun is one mode's run: the Guard, its faulty store and the record
// of what really happened.
type chaosRun struct {
	t      *testing.T
	mode   chaosMode
	opts   Options
	g      *core.Guard
	chaos  *chaosStore
	lease  time.Duration
	st     time.Duration // the Guard's StoreTimeout
	prefix string
	start  time.Time
	end    time.Time
	window time.Duration // how long a set of keys stays hot
	stalls *stall.Probe  // the stalls of the test process

	truth *truth
}

const (
	chaosSlack = 50 * time.Millisecond // scheduling slack in every time bound
	chaosGrace = 50 * time.Millisecond // how long before an answer a context must have ended to count as ended first
)

// chaosScale stretches a run's leases, store timeouts and length. A thread
// of a loaded machine waits tens of milliseconds for a CPU now and then
// (measured beside two CPU-bound processes on two cores: 30-100 ms, once
// 370 ms), holding up the heartbeats on the P it holds; leases of 60 ms and
// more outlast most such waits, the stall probe explains the rest, and the
// heartbeat's own tests pin its period and margin.
const chaosScale = 2

// maxDeadline bounds the deadlines and cancellations given to callers, in
// store timeouts.
const maxDeadline = 3

func runChaos(t *testing.T, opts Options, mode chaosMode, top, seed uint64) {
	rng := mrand.New(mrand.NewPCG(seed, 1))
	r := &chaosRun{
		t: t, mode: mode, opts: opts,
		lease:  chaosScale * (30*time.Millisecond + time.Duration(rng.Int64N(int64(170*time.Millisecond)))),
		st:     chaosScale * (100*time.Millisecond + time.Duration(rng.Int64N(int64(200*time.Millisecond)))),
		prefix: opts.KeyPrefix + strconv.FormatUint(seed%1e9, 36) + ":" + randomSuffix() + ":",
	}
	r.window = r.lease / 2
	t.Logf("mode %s seed %d: lease %s, store timeout %s, %d workers, %d hot keys, %s",
		mode.name, seed, r.lease.Round(time.Millisecond), r.st.Round(time.Millisecond), opts.Workers, opts.Keys, opts.Duration)
	r.chaos = newChaos(opts.Store, seed, r.st, opts)
	r.truth = newTruth(r)
	g, err := core.New(r.chaos, &core.Config{
		Lease:              r.lease,
		Retention:          time.Minute,
		StoreTimeout:       r.st,
		KeyPrefix:          r.prefix,
		FailOpen:           mode.failOpen,
		DisableGroupCommit: mode.ungrouped,
		Logger:             quiet,
		Observer:           r.observe,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	r.g = g

	stop := make(chan struct{})
	r.stalls = stall.Start()
	r.chaos.late = r.stalls.Late
	r.start = time.Now()
	r.end = r.start.Add(opts.Duration)
	var wg sync.WaitGroup
	wg.Go(func() { r.weather(mrand.New(mrand.NewPCG(seed, 2)), stop) })
	if mode.wait {
		wg.Go(func() { r.storms(mrand.New(mrand.NewPCG(seed, 3)), stop) })
	}
	var workers sync.WaitGroup
	for i := range opts.Workers {
		workers.Go(func() { r.work(mrand.New(mrand.NewPCG(seed, 100+uint64(i)))) })
	}
	finished := make(chan struct{})
	go func() { workers.Wait(); close(finished) }()
	limit := opts.Duration + 30*time.Second
	select {
	case <-finished:
	case <-time.After(limit):
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		close(stop)
		r.stalls.Stop()
		t.Fatalf("callers still running %s after the run ended (seed %d); goroutines:\n%s", limit-opts.Duration, seed, buf)
	}
	close(stop)
	wg.Wait()
	r.stalls.Stop()
	r.chaos.SetStormy(false)
	if opts.Restore != nil {
		opts.Restore()
	}
	r.truth.judgeLater()
	r.truth.finish()
	r.report(fmt.Sprintf("JOBONCE_CHAOS_SEED=%d go test -run '%s'", top, t.Name()))
}

func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%x", b)
}

// weather alternates calm and stormy spells, and cuts the store's
// connections now and then while stormy.
func (r *chaosRun) weather(rng *mrand.Rand, stop <-chan struct{}) {
	sleep := func(d time.Duration) bool {
		select {
		case <-stop:
			return false
		case <-time.After(d):
			return true
		}
	}
	for time.Now().Before(r.end) {
		r.chaos.SetStormy(false)
		if !sleep(time.Duration(50+rng.IntN(250)) * time.Millisecond) {
			return
		}
		r.chaos.SetStormy(true)
		spell := time.Now().Add(time.Duration(150+rng.IntN(450)) * time.Millisecond)
		for time.Now().Before(spell) {
			if r.opts.Cut != nil && rng.IntN(3) == 0 {
				r.opts.Cut()
				ok := sleep(time.Duration(10+rng.IntN(150)) * time.Millisecond)
				r.opts.Restore()
				if !ok {
					return
				}
			}
			if !sleep(time.Duration(20+rng.IntN(100)) * time.Millisecond) {
				return
			}
		}
	}
	r.chaos.SetStormy(false)
}

// work delivers jobs until the run ends.
func (r *chaosRun) work(rng *mrand.Rand) {
	// Workers join over the first lease, as a pool fills with work, rather
	// than all within a millisecond: a burst of goroutines that all start
	// at once holds a heartbeat up for longer than a lease of tens of
	// milliseconds, which no Guard can prevent.
	time.Sleep(time.Duration(rng.Int64N(int64(r.lease))))
	for time.Now().Before(r.end) {
		if r.mode.claimAPI && rng.IntN(4) != 0 {
			r.deliverClaims(rng)
		} else {
			r.deliverDo(rng)
		}
		pause := time.Duration(rng.IntN(3)) * time.Millisecond
		due := time.Now().Add(pause)
		time.Sleep(pause)
		r.stalls.Late(due, time.Now())
	}
}

// key picks a hot key, or now and then an older one whose copies should be
// duplicates by now. The hot keys change every window.
func (r *chaosRun) key(rng *mrand.Rand) string {
	gen := int(time.Since(r.start) / r.window)
	n := gen*r.opts.Keys + rng.IntN(r.opts.Keys)
	if rng.IntN(10) == 0 {
		n = rng.IntN((gen + 1) * r.opts.Keys)
	}
	return "k" + strconv.Itoa(n)
}

// ctxKind is how a caller's context ends.
type ctxKind uint8

const (
	ctxBackground ctxKind = iota
	ctxDeadline
	ctxCancel
	ctxCancelled // cancelled before the call
)

var ctxKindNames = [...]string{"background", "deadline", "cancel", "cancelled"}

// chaosCall is one delivery: its context and what happened during it. The
// Chaos store and the Observer find it in the context's values.
type chaosCall struct {
	id     int64
	kind   ctxKind
	ctx    context.Context
	cancel context.CancelFunc
	timer  *time.Timer
	start  time.Time

	mu      sync.Mutex
	doneAt  time.Time // when ctx ended, or will end at its deadline; zero: never
	spans   []span    // the store calls made with ctx (its values)
	charges []span    // time the store spent ignoring ctx
	events  []observed
}

type span struct{ from, to time.Time }

type observed struct {
	core.Event
	at time.Time
}

type chaosCallKey struct{}

func callOf(ctx context.Context) *chaosCall {
	c, _ := ctx.Value(chaosCallKey{}).(*chaosCall)
	return c
}

// charge records that a store call made with ctx ignored it for d from now.
func charge(ctx context.Context, d time.Duration) {
	if c := callOf(ctx); c != nil {
		now := time.Now()
		c.mu.Lock()
		c.charges = append(c.charges, span{now, now.Add(d)})
		c.mu.Unlock()
	}
}

// chargeSpan records that a store call made with ctx ignored it from from to to.
func chargeSpan(ctx context.Context, from, to time.Time) {
	if c := callOf(ctx); c != nil {
		c.mu.Lock()
		c.charges = append(c.charges, span{from, to})
		c.mu.Unlock()
	}
}

func (c *chaosCall) stored(from, to time.Time) {
	c.mu.Lock()
	c.spans = append(c.spans, span{from, to})
	c.mu.Unlock()
}

// ended returns when the call's context ended (or will end), if it can.
func (c *chaosCall) ended() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.doneAt, !c.doneAt.IsZero()
}

// within returns how much of [from, to] the given spans cover.
func within(spans []span, from, to time.Time) time.Duration {
	var in []span
	for _, s := range spans {
		if s.to.After(from) && s.from.Before(to) {
			in = append(in, s)
		}
	}
	slices.SortFunc(in, func(a, b span) int { return a.from.Compare(b.from) })
	var covered time.Duration
	cursor := from
	for _, s := range in {
		a, b := maxTime(s.from, cursor), minTime(s.to, to)
		if b.After(a) {
			covered += b.Sub(a)
			cursor = b
		}
	}
	return covered
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// ownStore returns how long the call spent in its own store calls, and in
// store calls that ignored its context, during [from, to].
func (c *chaosCall) ownStore(from, to time.Time) (own, charged time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return within(c.spans, from, to), within(c.charges, from, to)
}

func (c *chaosCall) eventsFor(key string) []observed {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []observed
	for _, e := range c.events {
		if e.Key == key {
			out = append(out, e)
		}
	}
	return out
}

var chaosIDs struct {
	sync.Mutex
	n int64
}

func (r *chaosRun) newCall(rng *mrand.Rand) *chaosCall {
	chaosIDs.Lock()
	chaosIDs.n++
	c := &chaosCall{id: chaosIDs.n}
	chaosIDs.Unlock()
	base := context.WithValue(context.Background(), chaosCallKey{}, c)
	d := time.Duration(rng.Int64N(int64(maxDeadline * r.st)))
	if rng.IntN(3) == 0 {
		d = time.Duration(rng.Int64N(int64(5 * time.Millisecond))) // ends almost at once
	}
	switch n := rng.IntN(20); {
	case n < 8:
		c.kind = ctxBackground
		c.ctx, c.cancel = context.WithCancel(base)
	case n < 14:
		c.kind = ctxDeadline
		c.ctx, c.cancel = context.WithTimeout(base, d)
		c.doneAt, _ = c.ctx.Deadline()
	case n < 19:
		c.kind = ctxCancel
		c.ctx, c.cancel = context.WithCancel(base)
		cancel := c.cancel
		c.timer = time.AfterFunc(d, func() {
			// Once cancel returns, ctx has ended: a goroutine held up
			// between the two must not make it look ended earlier.
			cancel()
			c.mu.Lock()
			c.doneAt = time.Now()
			c.mu.Unlock()
		})
	default:
		c.kind = ctxCancelled
		c.ctx, c.cancel = context.WithCancel(base)
		c.doneAt = time.Now()
		c.cancel()
	}
	c.start = time.Now()
	return c
}

func (c *chaosCall) close() {
	if c.timer != nil {
		c.timer.Stop()
	}
	c.cancel()
}

func (r *chaosRun) observe(ctx context.Context, e core.Event) {
	c := callOf(ctx)
	if c == nil {
		r.truth.violate("6 outcome not observed exactly once", "an outcome was observed with a context that is not the caller's: %s %s", e.Key, e.Outcome)
		return
	}
	c.mu.Lock()
	c.events = append(c.events, observed{e, time.Now()})
	c.mu.Unlock()
}

// jobPlan is what one job does.
type jobPlan struct {
	dur      time.Duration
	stubborn bool // ignores its context
	end      jobEnd
	tagged   bool // returns a result naming its call, so its done marker tells who wrote it
}

type jobEnd uint8

const (
	jobSucceeds jobEnd = iota
	jobFails
	jobPanics
)

type jobPanic struct{ key string }

var errJob = errors.New("chaos: the job failed")

func (r *chaosRun) plan(rng *mrand.Rand) jobPlan {
	var p jobPlan
	switch n := rng.IntN(20); {
	case n < 10:
		p.dur = time.Duration(rng.Int64N(int64(r.lease / 4)))
	case n < 17:
		p.dur = r.lease/4 + time.Duration(rng.Int64N(int64(r.lease*5/4)))
	default:
		p.dur = r.lease*3/2 + time.Duration(rng.Int64N(int64(r.lease*3/2)))
	}
	p.stubborn = rng.IntN(10) == 0
	p.tagged = rng.IntN(2) == 0 // untagged markers are equal, as a re-send may mistake them
	switch n := rng.IntN(20); {
	case n < 2:
		p.end = jobFails
	case n < 3:
		p.end = jobPanics
	}
	return p
}

// job returns the job's function: it records the run, takes p.dur (less
// when its context ends, unless stubborn) and ends as planned.
func (r *chaosRun) job(c *chaosCall, key string, p jobPlan, run **runRec) core.RunFunc {
	return func(ctx context.Context) ([]byte, error) {
		rec := r.truth.started(c, key, ctx, p.stubborn)
		*run = rec
		ok := false
		defer func() { r.truth.stopped(rec, ok) }()
		if p.dur > 0 {
			due := time.Now().Add(p.dur)
			t := time.NewTimer(p.dur)
			defer t.Stop()
			if p.stubborn {
				<-t.C
			} else {
				select {
				case <-t.C:
				case <-ctx.Done():
					return nil, context.Cause(ctx)
				}
			}
			r.stalls.Late(due, time.Now())
		}
		switch p.end {
		case jobFails:
			return nil, errJob
		case jobPanics:
			panic(jobPanic{key})
		}
		ok = true
		if p.tagged {
			return callTag(c.id), nil
		}
		return nil, nil
	}
}

// callTag is the result a tagged job stores with its done marker.
func callTag(id int64) []byte { return []byte("call " + strconv.FormatInt(id, 10)) }

// tagCall returns the call a stored result names, or 0.
func tagCall(v []byte) int64 {
	s, ok := strings.CutPrefix(string(v), "call ")
	if !ok {
		return 0
	}
	id, _ := strconv.ParseInt(s, 10, 64)
	return id
}

// delivery is one job of a delivery and what the Guard said about it.
type delivery struct {
	call     *chaosCall
	key      string
	run      *runRec // nil when the job's function did not run
	out      core.Outcome
	err      error
	value    []byte    // the result the Guard gave back: a Duplicate's names the marker's writer, when tagged
	panicked any       // recovered from the Guard's call
	answered time.Time // when the claim's answer came back: the job's start, or the call's return
	phases   []phase   // waits to bound (invariant 4)
	final    bool      // out is the final outcome
	// waited is, for a claim of the Claim API that may wait for its running
	// copy (Job.WaitUntil), the stretch of its Work before the job's start
	// (or Work's return): the claim's answer, should it have waited.
	waited *phase
}

// phase is a stretch of a call outside the job's function.
type phase struct {
	name     string
	from, to time.Time
	ctxBound bool          // bounded by the caller's context (the claim)
	budget   time.Duration // waits allowed outside the call's own store calls
	wait     time.Duration // how long it may wait for a running copy (Job.WaitUntil)
}

// waitUntil returns, in the Wait mode and for half the deliveries, when a
// delivery made now stops waiting for its running copy: within two store
// timeouts, or a few milliseconds now and then. Zero: it does not wait.
func (r *chaosRun) waitUntil(rng *mrand.Rand) time.Time {
	if !r.mode.wait || rng.IntN(2) == 0 {
		return time.Time{}
	}
	d := time.Duration(rng.Int64N(int64(2 * r.st)))
	if rng.IntN(4) == 0 {
		d = time.Duration(rng.Int64N(int64(5 * time.Millisecond)))
	}
	return time.Now().Add(d)
}

// waitFrom returns how long a phase that began at from may wait until
// until; zero for no wait.
func waitFrom(from, until time.Time) time.Duration {
	if until.IsZero() {
		return 0
	}
	return max(0, until.Sub(from))
}

func (r *chaosRun) deliverDo(rng *mrand.Rand) {
	c := r.newCall(rng)
	defer c.close()
	d := &delivery{call: c, key: r.key(rng)}
	fn := r.job(c, d.key, r.plan(rng), &d.run)
	until := r.waitUntil(rng)
	func() {
		defer func() { d.panicked = recover() }()
		var res core.Result
		res, d.err = r.g.Run(c.ctx, core.Job{Key: d.key, WaitUntil: until}, fn)
		d.out, d.value = res.Outcome, res.Value
	}()
	ret := time.Now()
	d.final = true
	wait := waitFrom(c.start, until)
	if d.run != nil {
		d.answered = d.run.start
		d.phases = []phase{
			{name: "claim", from: c.start, to: d.run.start, ctxBound: true, wait: wait},
			{name: "done marker", from: d.run.stop, to: ret, budget: r.st + completeBackoffs},
		}
	} else {
		d.answered = ret
		d.phases = []phase{{name: "claim", from: c.start, to: ret, ctxBound: true, wait: wait}}
	}
	r.truth.resolve(d)
	r.checkLater(d)
}

// checkLater checks d once the run has ended (see truth.later).
func (r *chaosRun) checkLater(d *delivery) {
	r.truth.mu.Lock()
	r.truth.later = append(r.truth.later, func() { r.check(d) })
	r.truth.mu.Unlock()
}

// completeBackoffs is the sum of the Guard's waits between retries of a done
// marker (core.completeBackoff), plus room for a timer that fires late.
const completeBackoffs = 300 * time.Millisecond

func (r *chaosRun) deliverClaims(rng *mrand.Rand) {
	c := r.newCall(rng)
	defer c.close()
	n := 1 + rng.IntN(4)
	seen := make(map[string]bool)
	var ds []*delivery
	var jobs []core.Job
	for range n {
		k := r.key(rng)
		if seen[k] {
			continue
		}
		seen[k] = true
		ds = append(ds, &delivery{call: c, key: k})
		jobs = append(jobs, core.Job{Key: k, Fingerprint: "fp:" + k, WaitUntil: r.waitUntil(rng)})
	}
	var claims []*core.Claim
	var claimPanic any
	func() {
		defer func() { claimPanic = recover() }()
		claims = r.g.Claim(c.ctx, jobs...)
	}()
	answered := time.Now()
	claimPhase := phase{name: "claim", from: c.start, to: answered, ctxBound: true}
	if claimPanic != nil {
		for _, d := range ds {
			d.panicked, d.answered, d.final = claimPanic, answered, true
			d.phases = []phase{claimPhase}
			r.truth.resolve(d)
			r.checkLater(d)
		}
		return
	}
	plans := make([]jobPlan, len(ds))
	for i := range ds {
		plans[i] = r.plan(rng)
	}
	work := func(i int) {
		d := ds[i]
		fn := r.job(c, d.key, plans[i], &d.run)
		var res core.Result
		start := time.Now()
		func() {
			defer func() { d.panicked = recover() }()
			res, d.err = claims[i].Work(c.ctx, fn)
		}()
		ret := time.Now()
		d.out, d.value = res.Outcome, res.Value
		d.answered = answered
		d.phases = []phase{claimPhase}
		if until := jobs[i].WaitUntil; !until.IsZero() {
			// Work may wait for a running copy, then claim the key again.
			to := ret
			if d.run != nil {
				to = d.run.start
			}
			d.waited = &phase{name: "wait", from: start, to: to, ctxBound: true, wait: waitFrom(start, until)}
		}
		if d.run != nil {
			d.phases = append(d.phases, phase{name: "work", from: d.run.stop, to: ret, budget: r.st})
		}
		d.final = d.panicked != nil || d.err != nil || d.out != core.Ran
	}
	if rng.IntN(2) == 0 {
		for i := range ds {
			work(i)
		}
	} else { // one goroutine per claim, as an adapter handling a batch would
		var wg sync.WaitGroup
		for i := range ds {
			wg.Go(func() { work(i) })
		}
		wg.Wait()
	}
	pending := 0
	for _, d := range ds {
		if !d.final {
			pending++
		}
	}
	start := time.Now()
	var outs []core.Outcome
	var finishPanic any
	func() {
		defer func() { finishPanic = recover() }()
		outs = r.g.Finish(c.ctx, claims...)
	}()
	ret := time.Now()
	for i, d := range ds {
		if evs := d.call.eventsFor(d.key); d.waited != nil && len(evs) == 1 && evs[0].Waited > 0 {
			// It waited: its answer is the last read of the key.
			d.answered = d.waited.to
			d.phases = append(d.phases, *d.waited)
		}
		if !d.final {
			d.final = true
			if finishPanic != nil {
				d.panicked = finishPanic
			} else {
				d.out = outs[i]
			}
			d.phases = append(d.phases, phase{name: "finish", from: start, to: ret, budget: time.Duration(pending) * (r.st + completeBackoffs)})
		} else if finishPanic == nil && outs[i] != d.out && !(d.panicked != nil && outs[i] == core.Failed) {
			r.truth.violate("6 outcome inconsistent with what ran", "Finish reported %s for %s, whose Work already reported %s as final", outs[i], d.key, d.out)
		}
		r.truth.resolve(d)
		r.checkLater(d)
	}
}
