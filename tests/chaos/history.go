package chaos

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
)

// The checks below hold every reported outcome against the history of the
// store's writes that the Chaos store records: each call that reached the
// wrapped store, when, and what the store answered (an answer the Guard may
// never have seen, when the fault lost it). Done markers outlive the run
// (a minute's retention), so a marker, once written, stays unless a
// failover forgot it (opForget).

// durable is what the store holds for a key after every call returned, as
// a probe delivery finds it.
type durable struct {
	out   core.Outcome // Duplicate when a marker is there
	value []byte       // the marker's stored result: it names its writer when tagged
	err   error
}

// lapseSlack is the clock granularity allowed when judging whether a lease
// could have run out (Redis counts milliseconds).
const lapseSlack = 5 * time.Millisecond

// history is one key's recorded store calls, read under the log's lock.
type history struct {
	t   *truth
	kl  *keyLog
	who map[driver.Token]int64 // the call each claim's token was granted to, as the runs tell
}

func (h history) call(token driver.Token) string {
	if id, ok := h.who[token]; ok {
		return fmt.Sprintf("call %d's claim", id)
	}
	return "claim " + token.String()[:8]
}

func isMarker(ev *storeEvent) bool { return ev.op == opComplete || ev.op == opCompleteBatch }

// written reports whether the store wrote ev's done marker.
func written(ev *storeEvent) bool { return isMarker(ev) && ev.reached && ev.innerErr == nil }

// mayHaveWritten reports whether ev's done marker reached the store and its
// effect is not known (the store's own answer was an error, such as a cut
// connection).
func mayHaveWritten(ev *storeEvent) bool {
	return isMarker(ev) && ev.reached && ev.innerErr != nil && !errors.Is(ev.innerErr, core.ErrLeaseLost)
}

// definite reports whether the Guard got the store's own answer to ev: ok
// or LeaseLost, not a fault.
func definite(ev *storeEvent) bool {
	switch {
	case ev.fault == panicBefore || ev.fault == panicAfter:
		return false
	case errors.Is(ev.err, core.ErrLeaseLost):
		return true
	}
	return ev.reached && ev.err == nil
}

// forgotten reports whether a failover lost the key's state between from and to.
func (h history) forgotten(from, to time.Time) bool {
	for _, ev := range h.kl.events {
		if ev.op == opForget && ev.reached && ev.innerErr == nil && !ev.sent.Before(from.Add(-lapseSlack)) && ev.sent.Before(to) {
			return true
		}
	}
	return false
}

func (h history) describe(ev *storeEvent) string {
	answer := "not reached"
	if ev.reached {
		answer = fmt.Sprintf("store ran it %s-%s and answered %v", h.t.at(ev.sent), h.t.at(ev.ran), errOrOK(ev.innerErr))
	}
	return fmt.Sprintf("%s %s-%s fault %s, %s; the Guard got %v", ev.op, h.t.at(ev.start), h.t.at(ev.stop), ev.fault, answer, errOrOK(ev.err))
}

func errOrOK(err error) any {
	if err == nil {
		return "ok"
	}
	return err
}

// checkStoreLocked checks the store's own answers to done markers (DESIGN
// §3, §6½.7): a marker names the claim that wrote it, so a Complete sent
// again for a claim whose marker is written answers nil, and a Complete of
// a claim never adopts another claim's marker.
func (h history) checkStoreLocked(key string) {
	t := h.t
	for _, e := range h.kl.events {
		if !isMarker(e) || !e.reached {
			continue
		}
		for _, f := range h.kl.events {
			if !written(f) || f == e || !f.ran.Before(e.sent) || h.forgotten(f.ran, e.sent) {
				continue
			}
			switch {
			case e.innerErr == nil && f.token != e.token:
				t.violateLocked("7 store: a Complete adopted another claim's done marker",
					"key %s: %s's done marker was written at %s, yet %s's Complete, sent after it, was answered ok (it adopted a marker it did not write): [%s] after [%s]",
					key, h.call(f.token), t.at(f.ran), h.call(e.token), h.describe(e), h.describe(f))
			case errors.Is(e.innerErr, core.ErrLeaseLost) && f.token == e.token:
				t.violateLocked("7 store: a Complete sent again for a written marker was answered LeaseLost",
					"key %s: %s's done marker was written at %s, yet the same claim's Complete sent again after it was answered LeaseLost (the marker does not name its writer): [%s] after [%s]",
					key, h.call(e.token), t.at(f.ran), h.describe(e), h.describe(f))
			default:
				continue
			}
			break
		}
	}
}

// judgeLocked holds one delivery's final outcome against the history
// (DESIGN §6½.7): LeaseLost only when the claim was really lost, Ran only
// when this claim's marker is durable, Unrecorded only when it is not,
// Duplicate only when a marker existed at the claim. It reports whether an
// outcome of LeaseLost or Unrecorded was false.
func (h history) judgeLocked(d *delivery, end durable) (falseExcuse bool) {
	t := h.t
	r := t.r
	name := fmt.Sprintf("key %s call %d (started %s, %s)", d.key, d.call.id, t.at(d.call.start), d.out)
	finalWriter := int64(0)
	if end.out == core.Duplicate {
		finalWriter = tagCall(end.value)
	}
	if d.run == nil {
		if d.out != core.Duplicate || d.panicked != nil {
			return false
		}
		w := tagCall(d.value)
		for _, ev := range h.kl.events {
			if (written(ev) || mayHaveWritten(ev)) && ev.sent.Before(d.answered) && (w == 0 || tagCall(ev.result) == w) {
				return false
			}
		}
		who := "any claim"
		if w != 0 {
			who = fmt.Sprintf("call %d", w)
		}
		t.violateLocked("7 Duplicate reported though no marker existed at its claim",
			"%s: its claim was answered at %s, before the store was sent a done marker of %s; the key's markers: [%s]", name, t.at(d.answered), who, h.markers())
		return false
	}
	if !d.run.ok || d.panicked != nil || (d.out != core.Ran && d.out != core.LeaseLost && d.out != core.Unrecorded) {
		return false
	}
	g, ok := t.grantOf(h.kl, d.run)
	if !ok {
		t.noteLocked("history: claim not found", "%s", name)
		return false
	}
	var writes, maybes, refusals []*storeEvent
	for _, ev := range h.kl.events {
		if ev.token != g.token || !ev.reached {
			continue
		}
		switch {
		case written(ev):
			writes = append(writes, ev)
		case mayHaveWritten(ev):
			maybes = append(maybes, ev)
		case errors.Is(ev.innerErr, core.ErrLeaseLost):
			refusals = append(refusals, ev)
		}
	}
	mine := tagCall(d.value)
	switch d.out {
	case core.Ran:
		switch {
		case len(writes) == 0 && len(maybes) == 0:
			t.violateLocked("7 Ran reported though no marker of this claim was written",
				"%s: no done marker of its claim reached the store: [%s]", name, t.tokenEvents(h.kl, g.token))
		case mine != 0 && finalWriter != 0 && finalWriter != mine:
			t.violateLocked("7 Ran reported though the durable marker is another claim's",
				"%s: the key's durable marker is call %d's; its claim's store calls: [%s]; the key's markers: [%s]", name, finalWriter, t.tokenEvents(h.kl, g.token), h.markers())
		}
		return false
	case core.LeaseLost:
		// A marker a failover lost afterwards (Options.Forget) left the
		// key without this claim: LeaseLost is then true.
		writes = slices.DeleteFunc(writes, func(ev *storeEvent) bool { return h.forgotten(ev.sent, time.Now()) })
		if len(writes) > 0 || (mine != 0 && finalWriter == mine) {
			how := "it is the key's durable marker"
			if len(writes) > 0 {
				how = "[" + h.describe(writes[0]) + "]"
			}
			t.violateLocked("7 LeaseLost reported though the claim's own marker was written",
				"%s: its done marker was written: %s; its claim's store calls: [%s]", name, how, t.tokenEvents(h.kl, g.token))
			return true
		}
		if len(refusals) == 0 {
			t.violateLocked("7 LeaseLost reported though the store never answered LeaseLost",
				"%s: no store call of its claim was answered LeaseLost: [%s]", name, t.tokenEvents(h.kl, g.token))
			return true
		}
		if !h.lostBy(g, refusals[0]) {
			t.violateLocked("7 store: answered LeaseLost while the claim held the key",
				"%s: the store answered LeaseLost at %s, though its claim (granted %s, last renewal sent %s, lease %s) could not have run out, and no other claim, release or failover took the key: [%s]",
				name, t.at(refusals[0].ran), t.at(g.ran), t.at(h.kl.covers[g.token]), r.lease.Round(time.Millisecond), t.tokenEvents(h.kl, g.token))
			return true
		}
	case core.Unrecorded:
		if len(writes) == 0 || h.forgotten(writes[0].ran, time.Now()) {
			return false
		}
		for _, ev := range h.kl.events {
			if ev.token == g.token && isMarker(ev) && ev.sent.After(writes[0].ran) && definite(ev) {
				t.violateLocked("7 Unrecorded reported though the claim's marker is in the store",
					"%s: its done marker was written [%s], and a later attempt was answered [%s]", name, h.describe(writes[0]), h.describe(ev))
				return true
			}
		}
		t.noteLocked("Unrecorded with its marker written and no later attempt answered", "%s: [%s]", name, t.tokenEvents(h.kl, g.token))
	}
	return false
}

// lostBy reports whether the claim g could have lost the key by the time
// the store answered ev LeaseLost: its lease could have run out, or it was
// released, or a failover lost it, or another claim was granted the key.
func (h history) lostBy(g grant, ev *storeEvent) bool {
	if !h.kl.covers[g.token].Add(h.t.r.lease).After(ev.ran.Add(lapseSlack)) {
		return true
	}
	for _, o := range h.kl.events {
		if !o.reached || !o.sent.Before(ev.ran) {
			continue
		}
		switch {
		case o == ev || o.token != g.token:
		case o.op == opRelease && !errors.Is(o.innerErr, core.ErrLeaseLost), written(o), mayHaveWritten(o):
			return true // released, or turned into its own marker
		}
		if o.op == opForget && o.innerErr == nil && o.sent.After(g.sent) {
			return true
		}
	}
	for _, o := range h.kl.grants {
		if o.token != g.token && o.sent.After(g.sent) && o.sent.Before(ev.ran) {
			return true
		}
	}
	return false
}

func (h history) markers() string {
	var out []string
	for _, ev := range h.kl.events {
		if isMarker(ev) && ev.reached {
			who := h.call(ev.token)
			if w := tagCall(ev.result); w != 0 {
				who = fmt.Sprintf("call %d's marker", w)
			}
			out = append(out, who+": "+h.describe(ev))
		}
	}
	return strings.Join(out, "; ")
}

// checkUnguarded checks that FailOpen ran a job unguarded only on an outage
// (DESIGN §2.6, §6½.8): the claim's failure was no answer the store gave
// (a refusal such as OOM, or ErrUnreplicated).
func (t *truth) checkUnguarded(d *delivery, name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.r.chaos.log
	l.mu.Lock()
	defer l.mu.Unlock()
	kl := l.keys[t.storedKey(d.key)]
	if kl == nil {
		return
	}
	var own, all []*storeEvent
	for _, ev := range kl.events {
		if (ev.op != opClaim && ev.op != opClaimBatch) || ev.err == nil || ev.stop.IsZero() || ev.stop.Before(d.call.start) || ev.stop.After(d.run.start) {
			continue
		}
		all = append(all, ev)
		if ev.call == d.call {
			own = append(own, ev)
		}
	}
	if len(own) > 0 {
		all = own
	}
	var answered []string
	for _, ev := range all {
		if !ev.fault.answered() && !errors.Is(ev.err, core.ErrUnreplicated) {
			return // an outage
		}
		answered = append(answered, fmt.Sprintf("%s %s-%s %s: %v", ev.op, t.at(ev.start), t.at(ev.stop), ev.fault, ev.err))
	}
	if len(answered) > 0 {
		t.violateLocked("8 FailOpen ran a job unguarded on an answer the store gave",
			"%s: the job ran unguarded at %s, though every claim of its key that failed meanwhile was answered by a reachable store: [%s]", name, t.at(d.run.start), strings.Join(answered, "; "))
	}
}
