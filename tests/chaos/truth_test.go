package chaos

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/internal/stall"
)

// judgeOutage judges one delivery that a deadline context stopped at
// +500ms and that the Guard answered Unavailable with err, after its last
// claim of the key failed at failedAt (from +0) and it returned at +650ms.
// It returns the breaches the judge found.
func judgeOutage(t *testing.T, failedAt time.Duration, err error) map[string]*breachGroup {
	t.Helper()
	g, gerr := core.New(memstore.New(), &core.Config{StoreTimeout: time.Second})
	if gerr != nil {
		t.Fatal(gerr)
	}
	start := time.Now()
	r := &chaosRun{t: t, g: g, st: time.Second, start: start,
		chaos: &chaosStore{log: newStoreLog()}, stalls: stall.Start()}
	defer r.stalls.Stop()
	r.truth = newTruth(r)

	call := &chaosCall{id: 1, kind: ctxDeadline, start: start, doneAt: start.Add(500 * time.Millisecond)}
	call.events = []observed{{Event: core.Event{Key: "k", Outcome: core.Unavailable, Err: err}}}
	sk, _ := g.StoredKey("k")
	ev := r.chaos.log.begin(context.WithValue(context.Background(), chaosCallKey{}, call), opClaim, 0, sk, driver.NewToken())
	ev.stop, ev.err = start.Add(failedAt), err

	d := &delivery{call: call, key: "k", out: core.Unavailable, err: err, final: true,
		answered: start.Add(650 * time.Millisecond)}
	r.check(d)
	return r.truth.breaches
}

// TestJudgeTakesTheGuardsDecisionFromItsLastStoreCall: a claim whose
// connection broke at +300ms, before the caller's deadline at +500ms, is an
// outage, though the call returned only at +650ms (a loaded machine ran the
// caller late); a claim that failed at +510ms, after the deadline, failed
// by the caller's own deadline, and Unavailable is then a breach.
func TestJudgeTakesTheGuardsDecisionFromItsLastStoreCall(t *testing.T) {
	outage := fmt.Errorf("%w: %w", core.ErrStoreUnavailable, io.EOF)
	if b := judgeOutage(t, 300*time.Millisecond, outage); len(b) != 0 {
		t.Fatalf("an outage decided before the caller's deadline was judged a breach: %v", breachNames(b))
	}
	b := judgeOutage(t, 510*time.Millisecond, outage)
	if b["5 the caller's own cancellation reported as a store outage"] == nil {
		t.Fatalf("an outage decided after the caller's deadline was not judged a breach: %v", breachNames(b))
	}
}

func breachNames(b map[string]*breachGroup) []string {
	var out []string
	for inv, g := range b {
		out = append(out, fmt.Sprintf("%s: %v", inv, g.examples))
	}
	return out
}

// TestAFailoverLosesOnlyAMarkerNoReplicaHas: the chaos store loses a done
// marker answered ErrUnreplicated only when its claim's marker was not
// written before: a marker written without a fault, or whose write reached
// the store and got no answer (a retry after a lost reply or a cut
// connection resends it), is durable, and copies may have read it as done.
func TestAFailoverLosesOnlyAMarkerNoReplicaHas(t *testing.T) {
	l := newStoreLog()
	tok, other := driver.NewToken(), driver.NewToken()
	require.False(t, l.mayHoldMarker("k", tok), "nothing written yet")
	claim := l.begin(nil, opClaimBatch, pass, "k", tok)
	l.applied(claim, time.Now(), driver.StateClaimed, nil)
	require.False(t, l.mayHoldMarker("k", tok), "a claim is no marker")
	marker := l.begin(nil, opCompleteBatch, errAfter, "k", tok)
	l.applied(marker, time.Now(), 0, nil)
	require.True(t, l.mayHoldMarker("k", tok), "the marker whose reply was lost is written")
	require.False(t, l.mayHoldMarker("k", other), "another claim's marker")
	forget := l.begin(nil, opForget, unreplicated, "k", tok)
	l.applied(forget, time.Now(), 0, nil)
	require.False(t, l.mayHoldMarker("k", tok), "a failover lost it")
	cut := l.begin(nil, opComplete, pass, "k", tok)
	l.applied(cut, time.Now(), 0, io.EOF)
	require.True(t, l.mayHoldMarker("k", tok), "a marker whose connection was cut may be written")
	refused := l.begin(nil, opComplete, pass, "k", other)
	l.applied(refused, time.Now(), 0, core.ErrLeaseLost)
	require.False(t, l.mayHoldMarker("k", other), "a marker the store refused is not written")
}
