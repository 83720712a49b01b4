package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
)

// errInjected is the error the faulty store returns for a call it fails
// before the store: one the Guard must classify as an outage.
var errInjected = fmt.Errorf("chaos: injected store failure: %w", driver.ErrUnreachable)

// quiet discards the Guards' logs.
var quiet = slog.New(slog.DiscardHandler)

// storePanic is the value a chaosStore panics with.
type storePanic struct{ Op string }

func (p storePanic) String() string { return "chaos: injected panic in " + p.Op }

// fault is what a Chaos store does to one call.
type fault uint8

const (
	pass         fault = iota
	errBefore          // fails without reaching the store
	errAfter           // reaches the store, then the reply is lost
	delayBefore        // a slow request; honours ctx
	delayAfter         // a slow reply; honours ctx
	hang               // no answer until ctx ends (or the store timeout, for a ctx that never ends)
	dead               // a dead connection: ignores ctx, then fails; half the time the store runs the call late
	panicBefore        // panics without reaching the store
	panicAfter         // reaches the store, then panics
	partial            // batches only: some entries fail, before or after reaching the store
	replyTimeout       // reaches the store, then no reply until ctx ends (or the store timeout)
	refused            // the store answers with an error of its own while reachable (Options.Refusal)
	unreplicated       // reaches the store, answered ErrUnreplicated (a claim is then released; see Options.Unreplicated)
	numFaults
)

var faultNames = [numFaults]string{"pass", "error", "lost-reply", "slow-request", "slow-reply", "hang", "dead", "panic", "panic-after", "partial", "reply-timeout", "refused", "unreplicated"}

func (f fault) String() string { return faultNames[f] }

// faultWeights is the mix of faults while stormy, in fault order from errBefore.
var faultWeights = [numFaults]int{errBefore: 16, errAfter: 12, delayBefore: 14, delayAfter: 14, hang: 10, dead: 10, panicBefore: 3, panicAfter: 3, partial: 18,
	replyTimeout: 8, refused: 10, unreplicated: 8}

// answered reports whether a fault is an answer the store gave while it
// was reachable, not an outage: FailOpen must not run a job on it.
func (f fault) answered() bool { return f == refused || f == unreplicated }

type op uint8

const (
	opClaim op = iota
	opExtend
	opComplete
	opRelease
	opClaimBatch
	opCompleteBatch
	opForget // a failover lost the key's latest write (Options.Forget)
)

var opNames = [...]string{"Claim", "Extend", "Complete", "Release", "ClaimBatch", "CompleteBatch", "Forget"}

func (o op) String() string { return opNames[o] }

// Chaos wraps a store and, while stormy, injects faults at random from a
// seeded generator: errors before or after the store ran the call (a write
// applied whose reply is lost, or times out), slow requests and replies,
// calls that hang until their context ends, calls that ignore their context
// for up to twice the store timeout (a dead connection), panics, errors on
// some entries of a batch (their writes applied or not), answers the store
// gives while reachable (Options.Refusal, as Redis's OOM), and writes
// answered ErrUnreplicated: a claim so answered is released, as the driver
// promises, and a done marker so answered (Options.Unreplicated) is
// lost half the time when Options.Forget is set, as a failover to a
// replica that missed it would lose it. It always
// implements driver.BatchStore, passing batches to the wrapped store's own
// batch calls when it has them and looping over single calls otherwise, so
// a Guard's group commit runs on every store.
//
// Extend never panics: the Guard extends leases from a timer goroutine,
// where a panic would end the process.
type chaosStore struct {
	inner   driver.Store
	batch   driver.BatchStore
	timeout time.Duration
	rate    float64

	refusal      func() error                                // nil: the store never answers errors while reachable
	unreplicated bool                                        // markers and extends may be answered ErrUnreplicated
	forget       func(ctx context.Context, key string) error // nil: no failover loses a write

	stormy  atomic.Bool
	mu      sync.Mutex
	fragile map[string]int // keys whose done marker a failover is about to lose
	rng     *rand.Rand
	log     *storeLog
	signals [numSignalFaults]int // notifications met by each signal fault
	// late receives how late a timer of the store's waits fired: a stall
	// of the test process (chaosRun.stalls), when set.
	late func(due, fired time.Time)
}

var _ driver.BatchStore = (*chaosStore)(nil)

// NewChaos wraps inner. storeTimeout is the Guard's StoreTimeout: delays are
// drawn below it, dead connections last up to twice it, and a call whose
// context never ends hangs for it at most. It starts calm.
func newChaos(inner driver.Store, seed uint64, storeTimeout time.Duration, opts Options) *chaosStore {
	c := &chaosStore{inner: inner, timeout: storeTimeout, rate: 0.3, rng: rand.New(rand.NewPCG(seed, 0x636861)), log: newStoreLog(),
		refusal: opts.Refusal, unreplicated: opts.Unreplicated, forget: opts.Forget, fragile: make(map[string]int)}
	c.batch, _ = inner.(driver.BatchStore)
	return c
}

// SetStormy turns fault injection on (true) or off.
func (c *chaosStore) SetStormy(on bool) { c.stormy.Store(on) }

func (c *chaosStore) pick(o op, batch, canPanic bool) (fault, time.Duration) {
	if !c.stormy.Load() {
		return pass, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rng.Float64() >= c.rate {
		return pass, 0
	}
	total := 0
	for f := errBefore; f < numFaults; f++ {
		total += c.weight(o, f, batch, canPanic)
	}
	n := c.rng.IntN(total)
	f := errBefore
	for ; f < numFaults; f++ {
		w := c.weight(o, f, batch, canPanic)
		if n < w {
			break
		}
		n -= w
	}
	var d time.Duration
	switch f {
	case delayBefore, delayAfter:
		d = time.Duration(c.rng.Int64N(int64(c.timeout)))
	case dead:
		d = time.Duration(c.rng.Int64N(2 * int64(c.timeout)))
	}
	return f, d
}

// weight is how likely fault f is among the faults of a call. Batches
// panic more often than single calls: there are fewer of them, and a
// panicking round must fail every call it answers.
func (c *chaosStore) weight(o op, f fault, batch, canPanic bool) int {
	switch f {
	case refused:
		if c.refusal == nil {
			return 0
		}
	case unreplicated:
		switch {
		case batch || o == opRelease:
			return 0
		case o != opClaim && !c.unreplicated:
			return 0
		}
	case partial:
		if !batch {
			return 0
		}
	case panicBefore, panicAfter:
		if !canPanic {
			return 0
		}
		if batch {
			return 3 * faultWeights[f]
		}
	}
	return faultWeights[f]
}

func (c *chaosStore) coin(p float64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rng.Float64() < p
}

// inject runs call under fault f and returns the error the caller gets
// instead of call's own results, if any.
func (c *chaosStore) inject(ctx context.Context, o op, f fault, d time.Duration, call func(context.Context)) error {
	switch f {
	case pass:
		call(ctx)
	case errBefore:
		return fmt.Errorf("%w: %s refused", errInjected, o)
	case errAfter:
		call(ctx)
		return fmt.Errorf("%w: %s reply lost", errInjected, o)
	case replyTimeout:
		call(ctx)
		if _, ok := ctx.Deadline(); ok {
			return c.untilDone(ctx)
		}
		if err := c.sleepCtx(ctx, c.timeout); err != nil {
			return err
		}
		return fmt.Errorf("%w: %s reply timed out", errInjected, o)
	case refused:
		return c.refusal()
	case unreplicated:
		call(ctx)
		return fmt.Errorf("%w (chaos: injected after the %s was written)", driver.ErrUnreplicated, o)
	case delayBefore:
		if err := c.sleepCtx(ctx, d); err != nil {
			return err
		}
		call(ctx)
	case delayAfter:
		call(ctx)
		return c.sleepCtx(ctx, d)
	case hang:
		if _, ok := ctx.Deadline(); ok {
			return c.untilDone(ctx)
		}
		if err := c.sleepCtx(ctx, c.timeout); err != nil {
			return err
		}
		return fmt.Errorf("%w: %s timed out", errInjected, o)
	case dead:
		charge(ctx, d)
		time.Sleep(d)
		if c.coin(0.5) {
			late, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
			call(late)
			cancel()
		}
		return fmt.Errorf("%w: %s connection reset", errInjected, o)
	case panicBefore:
		panic(storePanic{Op: o.String()})
	case panicAfter:
		call(ctx)
		panic(storePanic{Op: o.String()})
	}
	return nil
}

// sleepCtx waits d, or until ctx ends, and reports how late its timer, or
// ctx's deadline, woke it (see late).
func (c *chaosStore) sleepCtx(ctx context.Context, d time.Duration) error {
	due := time.Now().Add(d)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		c.deadlinePassed(ctx)
		return ctx.Err()
	case <-t.C:
		c.noteLate(due, time.Now())
		return nil
	}
}

// noteLate hands how late a wait's timer fired to c.late, when set.
func (c *chaosStore) noteLate(due, fired time.Time) {
	if c.late != nil {
		c.late(due, fired)
	}
}

// untilDone waits until ctx ends, and reports how late its deadline woke it.
func (c *chaosStore) untilDone(ctx context.Context) error {
	<-ctx.Done()
	c.deadlinePassed(ctx)
	return ctx.Err()
}

// deadlinePassed reports how late a context that ended at its deadline
// woke the goroutine waiting for it.
func (c *chaosStore) deadlinePassed(ctx context.Context) {
	if d, ok := ctx.Deadline(); ok && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		c.noteLate(d, time.Now())
	}
}

// Claim implements driver.Store. A claim answered ErrUnreplicated is
// released, as the driver promises of a store that answers so.
func (c *chaosStore) Claim(ctx context.Context, req driver.ClaimRequest) (reply driver.ClaimReply, err error) {
	return c.claim(ctx, req, c.inner.Claim)
}

// claim is Claim, or Await, sent to the wrapped store with send.
func (c *chaosStore) claim(ctx context.Context, req driver.ClaimRequest, send func(context.Context, driver.ClaimRequest) (driver.ClaimReply, error)) (reply driver.ClaimReply, err error) {
	f, d := c.pick(opClaim, false, true)
	ev := c.log.begin(ctx, opClaim, f, req.Key, req.Token)
	defer func() { ev.end(reply.State, err) }()
	ierr := c.inject(ctx, opClaim, f, d, func(ctx context.Context) {
		sent := time.Now()
		reply, err = send(ctx, req)
		c.log.applied(ev, sent, reply.State, err)
		c.log.granted(ev, sent, reply.State, err)
	})
	if f == unreplicated && err == nil && reply.State == driver.StateClaimed {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
		rev := c.log.begin(nil, opRelease, unreplicated, req.Key, req.Token)
		sent := time.Now()
		rerr := c.inner.Release(rctx, req.Key, req.Token)
		chargeSpan(ctx, sent, time.Now())
		c.log.applied(rev, sent, 0, rerr)
		rev.end(0, rerr)
		cancel()
	}
	if ierr != nil {
		return driver.ClaimReply{}, ierr
	}
	reply, err = c.readDurably(req.Key, reply, err)
	return reply, err
}

// setFragile counts a done marker of key that a failover is about to lose
// (by 1), or has lost (by -1).
func (c *chaosStore) setFragile(key string, by int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fragile[key] += by; c.fragile[key] == 0 {
		delete(c.fragile, key)
	}
}

// readDurably answers ErrUnreplicated for a claim that read a done marker
// a failover is about to lose, as a store that waits for its replicas
// would (redisstore's WaitReplicas): a replica that missed the marker does
// not acknowledge the read either. A Duplicate never rests on a marker
// that is then lost.
func (c *chaosStore) readDurably(key string, reply driver.ClaimReply, err error) (driver.ClaimReply, error) {
	if err != nil || reply.State != driver.StateDone {
		return reply, err
	}
	c.mu.Lock()
	fragile := c.fragile[key] > 0
	c.mu.Unlock()
	if fragile {
		return driver.ClaimReply{}, fmt.Errorf("%w (chaos: a done marker read before a failover lost it)", driver.ErrUnreplicated)
	}
	return reply, nil
}

// Extend implements driver.Store.
func (c *chaosStore) Extend(ctx context.Context, key string, token driver.Token, lease time.Duration) (err error) {
	f, d := c.pick(opExtend, false, false)
	ev := c.log.begin(ctx, opExtend, f, key, token)
	defer func() { ev.end(0, err) }()
	ierr := c.inject(ctx, opExtend, f, d, func(ctx context.Context) {
		sent := time.Now()
		err = c.inner.Extend(ctx, key, token, lease)
		c.log.applied(ev, sent, 0, err)
		if err == nil {
			c.log.extended(key, token, sent)
		}
	})
	return cmpErr(ierr, err)
}

// Complete implements driver.Store. A done marker answered ErrUnreplicated
// is lost half the time when the store can forget it (Options.Forget),
// unless the claim's marker may have been written before.
func (c *chaosStore) Complete(ctx context.Context, req driver.CompleteRequest) (err error) {
	f, d := c.pick(opComplete, false, true)
	ev := c.log.begin(ctx, opComplete, f, req.Key, req.Token)
	ev.setMarker(req)
	defer func() { ev.end(0, err) }()
	// A failover loses a marker no replica has; one this claim may have
	// written before (a retry after a lost reply or a cut connection) counts
	// as durable, and copies may have read it as done.
	lose := f == unreplicated && c.forget != nil && !c.log.mayHoldMarker(req.Key, req.Token) && c.coin(0.5)
	if lose {
		c.setFragile(req.Key, 1)
		defer c.setFragile(req.Key, -1)
	}
	ierr := c.inject(ctx, opComplete, f, d, func(ctx context.Context) {
		sent := time.Now()
		err = c.inner.Complete(ctx, req)
		c.log.applied(ev, sent, 0, err)
	})
	if lose && err == nil {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
		fev := c.log.begin(nil, opForget, unreplicated, req.Key, req.Token)
		sent := time.Now()
		ferr := c.forget(fctx, req.Key)
		chargeSpan(ctx, sent, time.Now())
		c.log.applied(fev, sent, 0, ferr)
		fev.end(0, ferr)
		cancel()
	}
	return cmpErr(ierr, err)
}

// Release implements driver.Store.
func (c *chaosStore) Release(ctx context.Context, key string, token driver.Token) (err error) {
	f, d := c.pick(opRelease, false, true)
	ev := c.log.begin(ctx, opRelease, f, key, token)
	defer func() { ev.end(0, err) }()
	ierr := c.inject(ctx, opRelease, f, d, func(ctx context.Context) {
		sent := time.Now()
		err = c.inner.Release(ctx, key, token)
		c.log.applied(ev, sent, 0, err)
	})
	return cmpErr(ierr, err)
}

func cmpErr(injected, own error) error {
	if injected != nil {
		return injected
	}
	return own
}

// Batch implements driver.BatchStore: the completes and claims of one batch
// fail, hang or panic together, or (partial) some entries fail.
func (c *chaosStore) Batch(ctx context.Context, completes []driver.CompleteRequest, claims []driver.ClaimRequest) (replies []driver.ClaimReply, claimErrs, completeErrs []error) {
	f, d := c.pick(opClaimBatch, true, true)
	nc, n := len(completes), len(completes)+len(claims)
	evs := make([]*storeEvent, n)
	for i, r := range completes {
		evs[i] = c.log.begin(ctx, opCompleteBatch, f, r.Key, r.Token)
		evs[i].setMarker(r)
	}
	for i, r := range claims {
		evs[nc+i] = c.log.begin(ctx, opClaimBatch, f, r.Key, r.Token)
	}
	replies, errs := make([]driver.ClaimReply, len(claims)), make([]error, n)
	defer func() {
		for i, ev := range evs {
			if i < nc {
				ev.end(0, errs[i])
			} else {
				ev.end(replies[i-nc].State, errs[i])
			}
		}
	}()
	all := func(ctx context.Context, idx []int) {
		var subDone []driver.CompleteRequest
		var subClaims []driver.ClaimRequest
		for _, i := range idx {
			if i < nc {
				subDone = append(subDone, completes[i])
			} else {
				subClaims = append(subClaims, claims[i-nc])
			}
		}
		rs, ces := make([]driver.ClaimReply, len(subClaims)), make([]error, len(subClaims))
		des := make([]error, len(subDone))
		sent := time.Now()
		if c.batch != nil {
			rs, ces, des = c.batch.Batch(ctx, subDone, subClaims)
		} else {
			for j, r := range subDone {
				des[j] = c.inner.Complete(ctx, r)
			}
			for j, r := range subClaims {
				rs[j], ces[j] = c.inner.Claim(ctx, r)
			}
		}
		var j, k int
		for _, i := range idx {
			if i < nc {
				errs[i] = des[k]
				c.log.applied(evs[i], sent, 0, des[k])
				k++
				continue
			}
			c.log.applied(evs[i], sent, rs[j].State, ces[j])
			c.log.granted(evs[i], sent, rs[j].State, ces[j])
			replies[i-nc], errs[i] = c.readDurably(claims[i-nc].Key, rs[j], ces[j])
			j++
		}
	}
	if f == partial {
		failed, sent := c.split(n)
		if len(sent) > 0 {
			all(ctx, sent)
		}
		c.markPartial(evs, failed)
		for _, i := range failed {
			o := opCompleteBatch
			if i >= nc {
				o, replies[i-nc] = opClaimBatch, driver.ClaimReply{}
			}
			errs[i] = fmt.Errorf("%w: %s entry %d failed", errInjected, o, i)
			if c.refusal != nil && !evs[i].applied() && c.coin(0.5) {
				// A pipeline's entry answered with an error of the store's
				// own (OOM) while the others went through.
				evs[i].setFault(refused)
				errs[i] = c.refusal()
			}
		}
		return replies, errs[nc:], errs[:nc:nc]
	}
	if ierr := c.inject(ctx, opClaimBatch, f, d, func(ctx context.Context) { all(ctx, seq(n)) }); ierr != nil {
		clear(replies)
		for i := range errs {
			errs[i] = ierr
		}
	}
	return replies, errs[nc:], errs[:nc:nc]
}

// markPartial records which entries of a partly failed batch failed.
func (c *chaosStore) markPartial(evs []*storeEvent, failed []int) {
	hit := make(map[int]bool, len(failed))
	for _, i := range failed {
		hit[i] = true
	}
	for i, ev := range evs {
		if !hit[i] {
			ev.setFault(pass)
		}
	}
}

// split picks some entries of a batch to fail. Half the time the failed
// entries still reach the store (their replies are lost), so sent then
// holds every entry.
func (c *chaosStore) split(n int) (failed, sent []int) {
	c.mu.Lock()
	lostReply := c.rng.IntN(2) == 0
	for i := range n {
		if c.rng.IntN(3) == 0 {
			failed = append(failed, i)
		} else {
			sent = append(sent, i)
		}
	}
	c.mu.Unlock()
	if lostReply {
		sent = seq(n)
	}
	return failed, sent
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// storeLog keeps what a Chaos store did, per stored key, for the checks.
type storeLog struct {
	mu   sync.Mutex
	keys map[string]*keyLog
	errs []time.Time // when calls that failed ended
}

type keyLog struct {
	events []*storeEvent
	grants []grant // claims the store granted, in order
	covers map[driver.Token]time.Time
}

// grant is a claim the wrapped store granted. The store ran it between
// sent and ran, so it holds it until a lease after some moment in between,
// unless extended.
type grant struct {
	token driver.Token
	sent  time.Time
	ran   time.Time
	call  *chaosCall // the call whose context the claim was sent with
}

type storeEvent struct {
	log   *storeLog
	call  *chaosCall
	op    op
	fault fault
	key   string
	token driver.Token
	start time.Time

	// set by setMarker: the done marker sent
	result []byte

	// set by applied, under log.mu, when the call reached the wrapped store
	reached    bool
	sent, ran  time.Time // the wrapped store's call ran between these
	innerState driver.State
	innerErr   error

	// set by end, under log.mu
	stop  time.Time
	state driver.State
	err   error
}

func newStoreLog() *storeLog { return &storeLog{keys: make(map[string]*keyLog)} }

func (l *storeLog) key(k string) *keyLog {
	kl := l.keys[k]
	if kl == nil {
		kl = &keyLog{covers: make(map[driver.Token]time.Time)}
		l.keys[k] = kl
	}
	return kl
}

func (l *storeLog) begin(ctx context.Context, o op, f fault, key string, token driver.Token) *storeEvent {
	var call *chaosCall
	if ctx != nil {
		call = callOf(ctx)
	}
	ev := &storeEvent{log: l, call: call, op: o, fault: f, key: key, token: token, start: time.Now()}
	l.mu.Lock()
	kl := l.key(key)
	kl.events = append(kl.events, ev)
	l.mu.Unlock()
	return ev
}

func (ev *storeEvent) end(state driver.State, err error) {
	now := time.Now()
	ev.log.mu.Lock()
	ev.stop, ev.state, ev.err = now, state, err
	if (err != nil && !errors.Is(err, core.ErrLeaseLost)) || ev.fault == panicBefore || ev.fault == panicAfter {
		ev.log.errs = append(ev.log.errs, now)
	}
	ev.log.mu.Unlock()
	if ev.call != nil {
		ev.call.stored(ev.start, now)
	}
}

// applied records that ev's call reached the wrapped store, which ran it
// between sent and now and answered state and err (an answer the caller may
// never get).
func (l *storeLog) applied(ev *storeEvent, sent time.Time, state driver.State, err error) {
	now := time.Now()
	l.mu.Lock()
	ev.reached, ev.sent, ev.ran, ev.innerState, ev.innerErr = true, sent, now, state, err
	l.mu.Unlock()
}

// applied reports whether the event's call reached the wrapped store.
func (ev *storeEvent) applied() bool {
	ev.log.mu.Lock()
	defer ev.log.mu.Unlock()
	return ev.reached
}

// setMarker records the done marker a complete sends.
func (ev *storeEvent) setMarker(req driver.CompleteRequest) {
	ev.log.mu.Lock()
	ev.result = req.Result
	ev.log.mu.Unlock()
}

func (l *storeLog) granted(ev *storeEvent, sent time.Time, state driver.State, err error) {
	if err != nil || state != driver.StateClaimed {
		return
	}
	key, token := ev.key, ev.token
	ran := time.Now()
	l.mu.Lock()
	kl := l.key(key)
	kl.grants = append(kl.grants, grant{token: token, sent: sent, ran: ran, call: ev.call})
	kl.covers[token] = sent
	l.mu.Unlock()
}

// mayHoldMarker reports whether the store may keep a done marker that token
// wrote to key: one written, or whose write reached the store with its
// answer unknown (a cut connection), with no failover that lost the key
// since.
func (l *storeLog) mayHoldMarker(key string, token driver.Token) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	kl := l.keys[key]
	if kl == nil {
		return false
	}
	held := false
	for _, ev := range kl.events {
		switch {
		case ev.op == opForget && ev.reached && ev.innerErr == nil:
			held = false
		case (written(ev) || mayHaveWritten(ev)) && ev.token == token:
			held = true
		}
	}
	return held
}

func (l *storeLog) extended(key string, token driver.Token, sent time.Time) {
	l.mu.Lock()
	kl := l.key(key)
	if sent.After(kl.covers[token]) {
		kl.covers[token] = sent
	}
	l.mu.Unlock()
}

// failed reports whether a call that ended in [from, to] met an injected
// fault or a store error (any key), for FailOpen's check that Unguarded
// follows a real store failure.
func (l *storeLog) failed(from, to time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.errs) - 1; i >= 0; i-- {
		at := l.errs[i]
		if at.Before(from.Add(-time.Second)) { // errs is in the order calls ended, give or take a lock
			break
		}
		if !at.Before(from) && !at.After(to) {
			return true
		}
	}
	return false
}

func (ev *storeEvent) setFault(f fault) {
	ev.log.mu.Lock()
	ev.fault = f
	ev.log.mu.Unlock()
}
