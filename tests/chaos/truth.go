package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
)

// truth is what really happened during a run, kept outside the store.
type truth struct {
	r *chaosRun

	mu       sync.Mutex
	keys     map[string]*keyTruth
	breaches map[string]*breachGroup // by invariant
	notes    map[string]*breachGroup // oddities that break no invariant
	counts   map[string]int
	outcomes map[string]int
	resolved []*delivery
	// later holds judgements of lease timing, made once the run has ended:
	// a stall of the test process shows in the timers that were late, which
	// the probe and the workload learn of only when they fire.
	later []func()
}

type keyTruth struct {
	active    []*runRec // runs whose function is running
	pending   []*runRec // runs that succeeded, whose outcome is not known yet
	effects   int       // successful runs
	excusing  int       // LeaseLost and Unrecorded outcomes
	untrue    int       // of those, reported though untrue (see history.judgeLocked)
	ran, dup  int       // Ran and Duplicate outcomes
	succeeded []string  // the outcomes of the successful runs
}

// runRec is one run of a job's function.
type runRec struct {
	call     *chaosCall
	key      string
	ctx      context.Context // the job's context
	stubborn bool
	start    time.Time
	stop     time.Time
	ok       bool
	lapses   []*runRec // runs that started while this one's done marker was pending
	late     bool      // started after its own claim's lease had run out
}

type breachGroup struct {
	n        int
	examples []string
}

func newTruth(r *chaosRun) *truth {
	return &truth{r: r, keys: make(map[string]*keyTruth), breaches: make(map[string]*breachGroup),
		notes: make(map[string]*breachGroup), counts: make(map[string]int), outcomes: make(map[string]int)}
}

func (t *truth) key(k string) *keyTruth {
	kt := t.keys[k]
	if kt == nil {
		kt = &keyTruth{}
		t.keys[k] = kt
	}
	return kt
}

func (t *truth) violate(inv, format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.violateLocked(inv, format, args...)
}

func (t *truth) violateLocked(inv, format string, args ...any) { add(t.breaches, inv, format, args...) }

func (t *truth) note(what, format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.noteLocked(what, format, args...)
}

func (t *truth) noteLocked(what, format string, args ...any) { add(t.notes, what, format, args...) }

func add(m map[string]*breachGroup, k, format string, args ...any) {
	g := m[k]
	if g == nil {
		g = &breachGroup{}
		m[k] = g
	}
	g.n++
	if len(g.examples) < 4 {
		g.examples = append(g.examples, fmt.Sprintf(format, args...))
	}
}

// at formats a time relative to the run's start.
func (t *truth) at(ts time.Time) string {
	if ts.IsZero() {
		return "never"
	}
	return fmt.Sprintf("+%s", ts.Sub(t.r.start).Round(100*time.Microsecond))
}

func (t *truth) storedKey(key string) string {
	sk, err := t.r.g.StoredKey(key)
	if err != nil {
		return key
	}
	return sk
}

// started records that a job's function began. A copy of the key still
// running, and not yet told to stop, breaks invariant 1.
func (t *truth) started(c *chaosCall, key string, ctx context.Context, stubborn bool) *runRec {
	rec := &runRec{call: c, key: key, ctx: ctx, stubborn: stubborn, start: time.Now()}
	t.mu.Lock()
	defer t.mu.Unlock()
	kt := t.key(key)
	if !t.r.mode.failOpen {
		t.checkLeaseLocked(rec)
		for _, a := range kt.active {
			b := rec
			if b.start.Before(a.start) {
				// The job that registers now began first, and was held up
				// before it registered: it is the copy that ran on.
				a, b = b, a
			}
			switch {
			case a.ctx.Err() != nil:
				t.counts["overlap with a copy told to stop"]++
				continue
			case b.late:
				t.counts["overlap with a copy that started after its lease (judged as such)"]++
				continue
			}
			explains, cause := t.overlapStall(a, b), t.overlapCause(a, b)
			t.later = append(t.later, func() {
				why, ok := explains()
				if ok {
					t.note("two copies ran at once across a pause of the test process", "key %s: call %d's job started at %s while call %d's job (started %s) ran; %s",
						key, b.call.id, t.at(b.start), a.call.id, t.at(a.start), why)
					return
				}
				t.violate("1 two copies ran at once", "key %s: call %d's job started at %s while call %d's job (started %s) ran and had not been told to stop; %s; %s",
					key, b.call.id, t.at(b.start), a.call.id, t.at(a.start), cause, why)
			})
		}
		for _, a := range kt.pending {
			a.lapses = append(a.lapses, rec)
		}
	}
	kt.active = append(kt.active, rec)
	return rec
}

// stopped records that a job's function returned (ok: it succeeded, so its
// effect happened).
func (t *truth) stopped(rec *runRec, ok bool) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	rec.stop, rec.ok = now, ok
	kt := t.key(rec.key)
	kt.active = slices.DeleteFunc(kt.active, func(r *runRec) bool { return r == rec })
	if ok {
		kt.effects++
		kt.pending = append(kt.pending, rec)
	}
}

// resolve records a delivery's final outcome.
func (t *truth) resolve(d *delivery) {
	t.mu.Lock()
	defer t.mu.Unlock()
	kt := t.key(d.key)
	t.resolved = append(t.resolved, d)
	out := d.out
	switch d.panicked.(type) {
	case nil:
	case jobPanic:
		out = core.Failed
	default:
		out = 0
	}
	t.outcomes[outcomeName(out, d.panicked)]++
	switch out {
	case core.LeaseLost, core.Unrecorded:
		kt.excusing++
		if !t.faultedLocked(d.key, d.call.start) && (d.run == nil || len(d.run.lapses) == 0) {
			if d.run != nil && out == core.LeaseLost {
				t.lapseLocked(d.run, time.Now(), "its done marker was refused (LeaseLost)")
			} else {
				t.noteLocked(out.String()+" with no fault on its key during the call", "key %s call %d (started %s, returned %s): %s",
					d.key, d.call.id, t.at(d.call.start), t.at(time.Now()), t.claimCalls(d.run))
			}
		}
	case core.Ran:
		kt.ran++
	case core.Duplicate:
		kt.dup++
	}
	a := d.run
	if a == nil || !a.ok {
		return
	}
	kt.succeeded = append(kt.succeeded, fmt.Sprintf("call %d ran %s-%s: %s", a.call.id, t.at(a.start), t.at(a.stop), outcomeName(out, d.panicked)))
	kt.pending = slices.DeleteFunc(kt.pending, func(r *runRec) bool { return r == a })
	for _, b := range a.lapses {
		if b.late {
			continue // reported when it started
		}
		if out != core.LeaseLost && out != core.Unrecorded && out != 0 {
			t.violateLocked("2 a copy ran while the done marker was pending, yet the first copy was not told", "key %s: call %d's job started at %s while call %d's done marker was pending, yet call %d reported %s; the first copy's %s; the second copy's %s",
				d.key, b.call.id, t.at(b.start), a.call.id, a.call.id, out, t.claimCalls(a), t.claimCalls(b))
			continue
		}
		t.lapseLocked(a, b.start, fmt.Sprintf("call %d's job started", b.call.id))
	}
}

func outcomeName(out core.Outcome, panicked any) string {
	switch panicked.(type) {
	case nil, jobPanic:
		return out.String()
	case storePanic:
		return "store panic escaped"
	}
	return "other panic"
}

// faultedLocked reports whether a store call on key that ended after from
// met an injected fault or failed.
func (t *truth) faultedLocked(key string, from time.Time) bool {
	l := t.r.chaos.log
	l.mu.Lock()
	defer l.mu.Unlock()
	kl := l.keys[t.storedKey(key)]
	if kl == nil {
		return false
	}
	for _, ev := range kl.events {
		if (ev.fault != pass || (ev.err != nil && !errors.Is(ev.err, core.ErrLeaseLost))) && (ev.stop.IsZero() || ev.stop.After(from)) {
			return true
		}
	}
	return false
}

// claimCalls describes the claim a run held and its store calls.
func (t *truth) claimCalls(a *runRec) string {
	if a == nil {
		return "no run"
	}
	l := t.r.chaos.log
	l.mu.Lock()
	defer l.mu.Unlock()
	kl := l.keys[t.storedKey(a.key)]
	if kl == nil {
		return "key unknown to the store"
	}
	g, ok := t.grantOf(kl, a)
	if !ok {
		return "claim not found"
	}
	return fmt.Sprintf("job ran %s-%s under the claim sent %s: [%s]", t.at(a.start), t.at(a.stop), t.at(g.sent), t.tokenEvents(kl, g.token))
}

// checkLeaseLocked checks that a job starts while its copy holds its
// claim (DESIGN §6½.1): before the lease of the claim the store granted it
// has run out.
func (t *truth) checkLeaseLocked(a *runRec) {
	l := t.r.chaos.log
	l.mu.Lock()
	defer l.mu.Unlock()
	kl := l.keys[t.storedKey(a.key)]
	if kl == nil {
		return
	}
	g, ok := t.grantOf(kl, a)
	if !ok {
		return
	}
	if end := g.ran.Add(t.r.lease); a.start.After(end) {
		a.late = true
		// The Guard runs no claim answered past half its lease, by the
		// clock: only a pause after that check can start the job late.
		checked := g.sent.Add(t.r.lease / 2)
		calls := t.tokenEvents(kl, g.token)
		t.later = append(t.later, func() {
			why, ok := t.r.stallExplains(checked, a.start, a.start.Sub(checked))
			if ok {
				t.note("a job started after its claim's lease had run out, across a pause of the test process", "key %s call %d: granted by %s, lease out by %s, started at %s; %s",
					a.key, a.call.id, t.at(g.ran), t.at(end), t.at(a.start), why)
				return
			}
			t.violate("1 a job started after its claim's lease had run out", "key %s call %d: the store granted the claim by %s (lease %s), so it ran out by %s, yet the job started at %s; the claim's store calls: [%s]; %s",
				a.key, a.call.id, t.at(g.ran), t.r.lease.Round(time.Millisecond), t.at(end), t.at(a.start), calls, why)
		})
	}
}

// overlapStall returns the judgement, to be made once the run has ended,
// of whether stalls of the test process explain why a's job was not yet
// cancelled when b's started, from a's renewals as they stand now.
func (t *truth) overlapStall(a, b *runRec) func() (string, bool) {
	l := t.r.chaos.log
	l.mu.Lock()
	kl := l.keys[t.storedKey(a.key)]
	var renewed time.Time
	var renewing bool
	if kl != nil {
		if g, ok := t.grantOf(kl, a); ok {
			renewed = kl.covers[g.token]
			renewing = t.renewingLocked(kl, g.token, renewed, b.start)
		}
	}
	l.mu.Unlock()
	return func() (string, bool) {
		if renewed.IsZero() {
			return "", false
		}
		return t.r.stallExplainsLapse(renewed, b.start, renewing)
	}
}

// renewingLocked reports whether an extend of token was sent after the
// claim's last renewal at renewed and before at: a beat in flight then.
func (t *truth) renewingLocked(kl *keyLog, token driver.Token, renewed, at time.Time) bool {
	for _, ev := range kl.events {
		if ev.token == token && ev.op == opExtend && ev.start.After(renewed) && ev.start.Before(at) {
			return true
		}
	}
	return false
}

// grantOf returns the claim the store granted to run a: among the claims
// the store ran on its key between the call's start and the job's start, and not
// released or completed before the job started, the one sent with the
// call's own context if any, else the last.
func (t *truth) grantOf(kl *keyLog, a *runRec) (grant, bool) {
	var found grant
	ok := false
	for _, g := range kl.grants {
		if g.sent.Before(a.call.start) || g.ran.After(a.start) || t.finishedBefore(kl, g.token, a.start) {
			continue
		}
		if ok && found.call == a.call && g.call != a.call {
			continue
		}
		found, ok = g, true
	}
	return found, ok
}

// finishedBefore reports whether a claim was released or completed before t.
func (t *truth) finishedBefore(kl *keyLog, token driver.Token, at time.Time) bool {
	for _, ev := range kl.events {
		if ev.token == token && (ev.op == opRelease || ev.op == opComplete || ev.op == opCompleteBatch) && ev.start.Before(at) {
			return true
		}
	}
	return false
}

// lapsedBeforeStart reports whether every claim that may have been b's
// (granted on its key during its claim, other than other's) had run out
// before b's job started.
func (t *truth) lapsedBeforeStart(kl *keyLog, b *runRec, other driver.Token) bool {
	found := false
	for _, g := range kl.grants {
		if g.token == other || g.sent.Before(b.call.start) || g.ran.After(b.start) || t.finishedBefore(kl, g.token, b.start) {
			continue
		}
		found = true
		if !g.ran.Add(t.r.lease).Before(b.start) {
			return false
		}
	}
	return found
}

// overlapCause says why copy a still ran when b started. It takes the store
// log's lock under the truth's.
func (t *truth) overlapCause(a, b *runRec) string {
	l := t.r.chaos.log
	l.mu.Lock()
	defer l.mu.Unlock()
	kl := l.keys[t.storedKey(a.key)]
	if kl == nil {
		return "the store never saw the key"
	}
	g, ok := t.grantOf(kl, a)
	if !ok {
		return "no claim granted to the first copy was found"
	}
	lease := t.r.lease
	renewed := kl.covers[g.token]
	lapse := renewed.Add(lease)
	extends := 0
	var stuck bool
	for _, ev := range kl.events {
		if ev.token != g.token || ev.op != opExtend {
			continue
		}
		extends++
		if ev.fault == dead && ev.start.Before(lapse) && (ev.stop.IsZero() || ev.stop.After(lapse)) {
			stuck = true
		}
	}
	var cause string
	switch {
	case b.late || t.lapsedBeforeStart(kl, b, g.token):
		cause = "the second copy's job started after its own claim's lease had run out (a late claim reply, or a claim that waited for Work)"
	case a.start.After(g.ran.Add(lease)):
		cause = fmt.Sprintf("the first copy's job started %s after the store granted its claim, after its lease had run out (a late claim reply, or a claim that waited for Work)", a.start.Sub(g.ran).Round(time.Millisecond))
	case lapse.After(b.start):
		cause = "the store granted the key before the first copy's lease could have run out"
	case stuck:
		cause = "the heartbeat was stuck in an extend that ignored its context when the lease ran out"
	case a.start.Add(lease / 3).After(lapse):
		cause = fmt.Sprintf("the first copy's job started %s after its claim was sent, so its lease ran out before the heartbeat's first beat, due a third of a lease after the job started (a late claim reply, or a claim that waited for Work)", a.start.Sub(g.sent).Round(time.Millisecond))
	case extends > 0:
		cause = fmt.Sprintf("the lease ran out at %s and the job was still not cancelled %s later", t.at(lapse), b.start.Sub(lapse).Round(100*time.Microsecond))
	default:
		cause = "no extend was ever sent"
	}
	return fmt.Sprintf("%s (lease %s; claim sent %s; last renewal sent %s; the first copy's claim's store calls: [%s])",
		cause, lease.Round(time.Millisecond), t.at(g.sent), t.at(renewed), t.tokenEvents(kl, g.token))
}

// lapseLocked judges a claim that lapsed while a's done marker was
// pending, found at at (what: how it showed). The claim must stay alive
// until the done marker is written or the write has failed (DESIGN §6½.5),
// unless the store failed a's heartbeat or done marker first.
func (t *truth) lapseLocked(a *runRec, at time.Time, what string) {
	l := t.r.chaos.log
	l.mu.Lock()
	defer l.mu.Unlock()
	kl := l.keys[t.storedKey(a.key)]
	if kl == nil {
		t.noteLocked("lapse: key unknown to the store", "key %s", a.key)
		return
	}
	g, ok := t.grantOf(kl, a)
	if !ok {
		t.noteLocked("lapse: claim not found", "key %s call %d", a.key, a.call.id)
		return
	}
	lease := t.r.lease
	extendsAfter := 0
	for _, ev := range kl.events {
		if ev.token != g.token || ev.start.After(at) {
			continue
		}
		if ev.op == opExtend && !ev.start.Before(a.stop) {
			extendsAfter++
		}
		faulty := ev.fault != pass || (ev.err != nil && !errors.Is(ev.err, core.ErrLeaseLost))
		if faulty && (ev.op == opExtend || ev.op == opComplete || ev.op == opCompleteBatch) {
			t.counts["claim lapsed after its heartbeat or done marker failed"]++
			return
		}
	}
	if g.sent.Add(lease).Before(a.start.Add(lease / 3)) {
		t.counts["claim lapsed after a late claim reply used up its lease"]++
		return
	}
	renewed := kl.covers[g.token]
	lapse := renewed.Add(lease)
	for _, ev := range kl.events {
		if ev.token == g.token && ev.op == opExtend && ev.start.Before(lapse) && (ev.stop.IsZero() || ev.stop.After(lapse)) {
			t.counts["claim lapsed while a renewal sent in time was still in flight"]++
			return
		}
	}
	renewing := t.renewingLocked(kl, g.token, renewed, minTime(at, lapse))
	calls := t.tokenEvents(kl, g.token)
	t.later = append(t.later, func() {
		why, ok := t.r.stallExplainsLapse(renewed, minTime(at, lapse), renewing)
		switch {
		case ok:
			t.note("claim lapsed while its done marker was pending, across a pause of the test process", "key %s call %d: %s", a.key, a.call.id, why)
		case lapse.After(at):
			t.note("claim lost before its lease could have run out", "key %s: call %d's claim (lease %s, last renewed %s) was lost by %s, when %s; the claim's store calls: [%s]",
				a.key, a.call.id, lease.Round(time.Millisecond), t.at(renewed), t.at(at), what, calls)
		case extendsAfter == 0 && lapse.After(a.stop):
			t.violate("heartbeat (DESIGN 6½.5): the claim lapsed while its done marker was pending", "key %s: call %d's job returned at %s with its lease (%s, last renewed %s) alive; no extend was sent after that, the lease ran out at %s, and at %s %s while the done marker was still pending (DESIGN §6½.5: the claim stays alive until the done marker is written or the write has failed); the claim's store calls: [%s]; %s",
				a.key, a.call.id, t.at(a.stop), lease.Round(time.Millisecond), t.at(renewed), t.at(lapse), t.at(at), what, calls, why)
		default:
			t.note("lease ran out while the job ran", "key %s: call %d's lease (%s, last renewed %s) ran out before its job returned at %s; at %s %s; the claim's store calls: [%s]",
				a.key, a.call.id, lease.Round(time.Millisecond), t.at(renewed), t.at(a.stop), t.at(at), what, calls)
		}
	})
}

// tokenEvents lists the store calls made for one claim, with the store
// log's lock held.
func (t *truth) tokenEvents(kl *keyLog, token driver.Token) string {
	var evs []string
	for _, ev := range kl.events {
		if ev.token == token {
			evs = append(evs, fmt.Sprintf("%s %s-%s %s %v", ev.op, t.at(ev.start), t.at(ev.stop), ev.fault, ev.err))
		}
	}
	return strings.Join(evs, "; ")
}

// check checks one delivery's answer (invariants 4, 5 and 6).
func (r *chaosRun) check(d *delivery) {
	t := r.truth
	c := d.call
	evs := c.eventsFor(d.key)
	name := fmt.Sprintf("key %s call %d (%s ctx, started %s)", d.key, c.id, ctxKindNames[c.kind], t.at(c.start))
	r.checkTimes(d, name)
	if len(evs) == 1 && evs[0].Waited > 0 {
		t.mu.Lock()
		t.counts["waited for a running copy, then "+evs[0].Outcome.String()]++
		t.mu.Unlock()
	}

	out := d.out
	switch p := d.panicked.(type) {
	case nil:
	case jobPanic:
		out = core.Failed
		if d.run == nil {
			t.violate("6 outcome inconsistent with what ran", "%s: the job's panic came back though no job ran", name)
		}
	case storePanic:
		if len(evs) == 0 {
			what := "the job did not run"
			if d.run != nil && !d.run.ok {
				what = "the job had run and failed"
			} else if d.run != nil {
				what = "the job had run and succeeded: its effect is neither recorded nor reported"
			}
			t.violate("6 a store panic escaped the Guard unobserved", "%s: a store panic (%s) escaped the Guard and no outcome was observed; %s", name, p, what)
		}
		return
	default:
		t.violate("6 unexpected panic", "%s: unexpected panic: %v", name, p)
		return
	}

	switch {
	case len(evs) != 1:
		var got []string
		for _, e := range evs {
			got = append(got, e.Outcome.String())
		}
		t.violate("6 outcome not observed exactly once", "%s: want one observed outcome (%s), got %d: %v", name, out, len(evs), got)
	case evs[0].Outcome != out:
		t.violate("6 outcome not observed exactly once", "%s: returned %s but observed %s", name, out, evs[0].Outcome)
	}

	ran := d.run != nil
	canceled := out.String() == "canceled"
	switch {
	case out == 0 || out == core.Conflict || out == core.Rejected:
		t.violate("6 outcome inconsistent with what ran", "%s: unexpected outcome %s (err %v)", name, out, d.err)
	case out == core.Unguarded && !r.mode.failOpen:
		t.violate("6 outcome inconsistent with what ran", "%s: Unguarded without FailOpen", name)
	case executed(out) != ran && !canceled:
		t.violate("6 outcome inconsistent with what ran", "%s: outcome %s but the job %s", name, out, map[bool]string{true: "ran", false: "did not run"}[ran])
	case ran && (out == core.Ran || out == core.LeaseLost || out == core.Unrecorded || out == core.Unguarded) && !d.run.ok:
		t.violate("6 outcome inconsistent with what ran", "%s: acknowledged as %s but the job failed", name, out)
	case ran && out == core.Failed && d.run.ok:
		t.violate("6 outcome inconsistent with what ran", "%s: reported Failed but the job succeeded: its effect happened and will be repeated", name)
	}
	if canceled && ran {
		t.violate("5 job ran after its context ended first", "%s: reported %s though the job ran", name, out)
	}
	if d.panicked == nil {
		wantNil := out == core.Ran || out == core.Duplicate || out == core.LeaseLost || out == core.Unrecorded || out == core.Unguarded
		if wantNil != (d.err == nil) {
			t.violate("6 outcome inconsistent with what ran", "%s: outcome %s with error %v", name, out, d.err)
		}
		switch out {
		case core.Unavailable:
			if !errors.Is(d.err, core.ErrStoreUnavailable) {
				t.violate("6 outcome inconsistent with what ran", "%s: Unavailable with error %v", name, d.err)
			}
		case core.Running:
			if !errors.Is(d.err, core.ErrRunning) {
				t.violate("6 outcome inconsistent with what ran", "%s: Running with error %v", name, d.err)
			}
		}
	}

	end, ends := c.ended()
	kindErr := context.Canceled
	if c.kind == ctxDeadline {
		kindErr = context.DeadlineExceeded
	}
	observedAs := func(o core.Outcome) bool { return len(evs) > 0 && evs[0].Outcome == o }
	if ends && !ran && d.panicked == nil {
		// The Guard decides after the answer to its last store call on the
		// key, not when the test reads the clock after the call returned:
		// on a loaded machine the two can be far apart.
		decided, known := t.decidedAfter(d)
		endedFirst, by := end.Before(d.answered.Add(-chaosGrace)), "it returned at "+t.at(d.answered)
		if known {
			endedFirst, by = end.Before(decided), "the claim that failed with its error was answered at "+t.at(decided)
		}
		first := c.kind == ctxCancelled || endedFirst ||
			(!end.After(d.answered) && errors.Is(d.err, kindErr))
		switch {
		case !first:
		case out == core.Running || out == core.Duplicate: // the store's definite answer is kept
		case (errors.Is(d.err, core.ErrStoreUnavailable) || observedAs(core.Unavailable)) && !endedFirst:
			// The store failed before the context ended, or both ended
			// together: either reading is right.
			if end.Before(d.answered.Add(-chaosGrace)) {
				t.note("Unavailable decided before the caller's context ended, returned after it", "%s: its context ended at %s; %s; it returned at %s",
					name, t.at(end), by, t.at(d.answered))
			}
		case errors.Is(d.err, core.ErrStoreUnavailable) || observedAs(core.Unavailable):
			t.violate("5 the caller's own cancellation reported as a store outage", "%s: its context ended at %s, before the Guard could decide (%s), yet it got %s, error %v",
				name, t.at(end), by, out, d.err)
		case !errors.Is(d.err, kindErr):
			t.violate("5 answered with something else than ctx.Err() after its context ended", "%s: its context ended at %s, before the Guard could decide (%s), yet it got %s, error %v",
				name, t.at(end), by, out, d.err)
		}
	}
	if ends && ran && (c.kind == ctxCancelled || end.Before(d.answered.Add(-chaosGrace))) {
		t.violate("5 job ran after its context ended first", "%s: the job started at %s though its caller's context had ended at %s, before the claim was answered at %s (outcome %s)",
			name, t.at(d.run.start), t.at(end), t.at(d.answered), out)
	}
	if out == core.Unguarded {
		if ends && !end.After(d.run.start) && len(evs) > 0 && errors.Is(evs[0].Err, kindErr) {
			t.violate("5 ran unguarded on its own cancellation", "%s: ran unguarded because its own context ended at %s (%v)", name, t.at(end), evs[0].Err)
		}
		if !r.chaos.log.failed(c.start, d.run.start) {
			t.violate("6 unguarded without a store failure", "%s: ran unguarded though no store call failed between its start and the job's at %s", name, t.at(d.run.start))
		}
		t.checkUnguarded(d, name)
	}
}

// decidedAfter returns a moment before which the Guard cannot have
// decided d's outcome of a store failure: the earliest answer among the
// claims of d's key that failed with the error d got (a batch's failure is
// every entry's, so which entry was d's does not matter), or, for a call
// that gave up on a round trip that outlived its bound, the earliest start
// of such a round trip plus StoreTimeout; and never after d returned.
// Claims sent with d's context count, and the group commit's batches,
// which carry another caller's. known is false when no claim explains d's
// error.
func (t *truth) decidedAfter(d *delivery) (at time.Time, known bool) {
	if d.err == nil {
		return time.Time{}, false
	}
	msg := d.err.Error()
	stuck := strings.Contains(msg, "did not return within StoreTimeout")
	l := t.r.chaos.log
	l.mu.Lock()
	defer l.mu.Unlock()
	kl := l.keys[t.storedKey(d.key)]
	if kl == nil {
		return time.Time{}, false
	}
	for _, ev := range kl.events {
		switch {
		case ev.op != opClaim && ev.op != opClaimBatch,
			ev.call != d.call && ev.op != opClaimBatch,
			ev.start.Before(d.call.start.Add(-lapseSlack)), ev.start.After(d.answered):
			continue
		}
		var answer time.Time
		switch {
		case stuck:
			answer = ev.start.Add(t.r.st)
		case ev.err != nil && !ev.stop.IsZero() && strings.Contains(msg, ev.err.Error()):
			answer = ev.stop
		default:
			continue
		}
		if !known || answer.Before(at) {
			at, known = answer, true
		}
	}
	if known && d.answered.Before(at) {
		at = d.answered
	}
	return at, known
}

// checkTimes checks invariant 4: each stretch of a call outside the job's
// function ends within the caller's context plus one bounded store call.
func (r *chaosRun) checkTimes(d *delivery, name string) {
	t := r.truth
	c := d.call
	end, ends := c.ended()
	for _, p := range d.phases {
		if p.to.Before(p.from) {
			continue
		}
		// Time the test process spent paused is not the Guard's. Outside
		// its own store calls, at least paused less own of it was.
		paused := r.stalls.Within(p.from, p.to)
		dur := p.to.Sub(p.from) - paused
		own, charged := c.ownStore(p.from, p.to)
		wait := p.to.Sub(p.from) - own - max(0, paused-own)
		switch {
		case p.ctxBound && ends:
			// A call whose context ended may still wait for the round trip
			// that carries its request: that is its one bounded store call.
			// A claim the store granted after the context ended is then
			// released: one more bounded store call.
			left := max(0, end.Sub(p.from))
			release := time.Duration(0)
			if d.out == core.Canceled {
				release = r.st
			}
			if limit := left + r.st + release + charged + chaosSlack; dur > limit {
				t.violate("4 took longer than its context plus one store call", "%s: %s took %s, less %s the test process was paused; its context ended %s after it began (limit %s with the store timeout, and %s of store calls that ignored their context)",
					name, p.name, dur.Round(time.Millisecond), paused.Round(time.Millisecond), left.Round(time.Millisecond), limit.Round(time.Millisecond), charged.Round(time.Millisecond))
			}
		case p.ctxBound:
			// Behind at most two rounds of others' calls, each as long as the
			// longest deadline plus a dead connection, and its own; and a
			// copy that waits for its running copy (Job.WaitUntil) waits
			// that long more, then makes one store call.
			if limit := 2*(maxDeadline*r.st+2*r.st) + r.st + p.wait + charged + chaosSlack; dur > limit {
				t.violate("4 a call with no deadline took too long", "%s: %s took %s, less %s the test process was paused, with a context that never ended (limit %s)", name, p.name, dur.Round(time.Millisecond), paused.Round(time.Millisecond), limit.Round(time.Millisecond))
			}
		default:
			if wait > p.budget+chaosSlack {
				t.violate("4 waited past its budget after the job", "%s: %s took %s, less %s the test process was paused, %s of it outside its own store calls (allowed %s)",
					name, p.name, dur.Round(time.Millisecond), paused.Round(time.Millisecond), wait.Round(time.Millisecond), (p.budget + chaosSlack).Round(time.Millisecond))
			}
		}
	}
}

// finish runs the checks that need the whole run: invariants 2, 3 and 7.
// judgeLater makes the judgements kept for the end of the run (see later),
// in the order they were kept.
func (t *truth) judgeLater() {
	t.mu.Lock()
	later := t.later
	t.later = nil
	t.mu.Unlock()
	for _, judge := range later {
		judge()
	}
}

func (t *truth) finish() {
	r := t.r
	t.mu.Lock()
	var keys []string
	for k, kt := range t.keys {
		if len(kt.active) > 0 || len(kt.pending) > 0 {
			t.violateLocked("6 runs left over", "key %s: %d runs still active and %d pending after every call returned", k, len(kt.active), len(kt.pending))
		}
		if kt.ran > 0 || kt.dup > 0 || kt.effects > 0 {
			keys = append(keys, k)
		}
	}
	t.mu.Unlock()
	sort.Strings(keys)

	// Every claim has expired a lease after the last call returned.
	time.Sleep(r.lease + 20*time.Millisecond)
	g, err := core.New(r.opts.Verify, &core.Config{Lease: r.lease, Retention: time.Minute, KeyPrefix: r.prefix, Logger: quiet})
	if err != nil {
		r.t.Fatal(err)
	}
	errProbe := errors.New("chaos: probe")
	ends := make(map[string]durable, len(keys))
	for _, k := range keys {
		var end durable
		for range 10 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			res, err := g.Run(ctx, core.Job{Key: k}, func(context.Context) ([]byte, error) { return nil, errProbe })
			cancel()
			end = durable{out: res.Outcome, value: res.Value, err: err}
			if end.out != core.Running && end.out != core.Unavailable {
				break
			}
			time.Sleep(r.lease)
		}
		ends[k] = end
	}

	t.mu.Lock()
	l := r.chaos.log
	l.mu.Lock()
	who := make(map[string]map[driver.Token]int64)
	for _, d := range t.resolved {
		kl := l.keys[t.storedKey(d.key)]
		if d.run == nil || kl == nil {
			continue
		}
		if g, ok := t.grantOf(kl, d.run); ok {
			if who[d.key] == nil {
				who[d.key] = make(map[driver.Token]int64)
			}
			who[d.key][g.token] = d.call.id
		}
	}
	for _, k := range keys {
		if kl := l.keys[t.storedKey(k)]; kl != nil {
			history{t: t, kl: kl, who: who[k]}.checkStoreLocked(k)
		}
	}
	for _, d := range t.resolved {
		kl := l.keys[t.storedKey(d.key)]
		if kl == nil || r.mode.failOpen && d.out == core.Unguarded {
			continue
		}
		if (history{t: t, kl: kl, who: who[d.key]}).judgeLocked(d, ends[d.key]) {
			t.key(d.key).untrue++
		}
	}
	l.mu.Unlock()
	for _, k := range keys {
		kt := t.keys[k]
		if !r.mode.failOpen && kt.effects > 1+kt.excusing-kt.untrue {
			t.violateLocked("2 effect repeated without a true LeaseLost or Unrecorded", "key %s: its job succeeded %d times; LeaseLost or Unrecorded reported %d times, %d of them untrue: [%s]",
				k, kt.effects, kt.excusing, kt.untrue, strings.Join(kt.succeeded, "; "))
		}
		t.counts["effects repeated (reported LeaseLost/Unrecorded)"] += max(0, min(kt.effects-1, kt.excusing))
	}
	t.mu.Unlock()

	checked := 0
	for _, k := range keys {
		kt := t.keys[k]
		if kt.ran == 0 && kt.dup == 0 {
			continue
		}
		checked++
		end := ends[k]
		if end.out == core.Duplicate {
			continue
		}
		inv, what := "3 a Ran was not durable", fmt.Sprintf("reported Ran %d times", kt.ran)
		if kt.ran == 0 {
			inv, what = "6 a Duplicate was acknowledged for a key that is not done", fmt.Sprintf("reported Duplicate %d times", kt.dup)
		}
		t.violate(inv, "key %s %s, but a later delivery got %s (%v) instead of Duplicate; its done markers: [%s]", k, what, end.out, end.err, t.completes(k))
	}
	t.counts["keys checked durable"] = checked
}

// completes lists the done markers sent for key.
func (t *truth) completes(key string) string {
	l := t.r.chaos.log
	l.mu.Lock()
	defer l.mu.Unlock()
	kl := l.keys[t.storedKey(key)]
	if kl == nil {
		return ""
	}
	var evs []string
	for _, ev := range kl.events {
		if ev.op == opComplete || ev.op == opCompleteBatch {
			evs = append(evs, fmt.Sprintf("%s %s-%s %s %v", ev.op, t.at(ev.start), t.at(ev.stop), ev.fault, ev.err))
		}
	}
	return strings.Join(evs, "; ")
}

// report logs the run's figures and fails the test on any breach.
func (r *chaosRun) report(replay string) {
	t := r.truth
	l := r.chaos.log
	faults := make(map[string]int)
	ops := make(map[string]int)
	l.mu.Lock()
	for _, kl := range l.keys {
		for _, ev := range kl.events {
			ops[ev.op.String()]++
			if ev.fault != pass {
				faults[ev.op.String()+" "+ev.fault.String()]++
			}
		}
	}
	l.mu.Unlock()
	r.chaos.mu.Lock()
	for f, n := range r.chaos.signals {
		if n > 0 {
			faults["signal "+signalFaultNames[f]] = n
		}
	}
	r.chaos.mu.Unlock()
	r.t.Logf("outcomes: %s", sortedCounts(t.outcomes))
	r.t.Logf("store calls (per key): %s", sortedCounts(ops))
	r.t.Logf("faults injected: %s", sortedCounts(faults))
	r.t.Logf("also: %s", sortedCounts(t.counts))
	_, longest := r.stalls.Longest(r.start, time.Now())
	r.t.Logf("pauses of the test process: %s of %s, the longest %s",
		r.stalls.Within(r.start, time.Now()).Round(100*time.Microsecond), time.Since(r.start).Round(time.Millisecond), longest.Round(100*time.Microsecond))
	for _, k := range sortedKeys(t.notes) {
		g := t.notes[k]
		r.t.Logf("note: %s: %d, e.g. %s", k, g.n, strings.Join(g.examples, " | "))
	}
	for _, inv := range sortedKeys(t.breaches) {
		g := t.breaches[inv]
		r.t.Errorf("invariant %s: %d times (replay: %s):\n  %s",
			inv, g.n, replay, strings.Join(g.examples, "\n  "))
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func sortedCounts(m map[string]int) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// executed reports whether the job's function ran for outcome out, by the
// outcomes' documentation.
func executed(out core.Outcome) bool {
	switch out {
	case core.Ran, core.Failed, core.LeaseLost, core.Unrecorded, core.Unguarded:
		return true
	}
	return false
}
