package core

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jobonce/jobonce/core/driver"
)

// Finish records the done markers of claims whose Work left them pending,
// in one store round trip when the store is a driver.BatchStore, and
// returns each claim's final outcome, in order: Ran, LeaseLost or
// Unrecorded for a pending claim (each claim's heartbeat keeps it alive
// until its marker is written or the write failed). For a claim whose Work
// was final, Finish repeats that outcome; for a nil claim, or one Work was
// not called on, it reports Rejected, as for a claim of another Guard,
// which it leaves as it is (a pending one for its own Guard's Finish). A
// claim listed twice is finished once and reported at each place. Only the
// pending claims are observed.
func (g *Guard) Finish(ctx context.Context, claims ...*Claim) []Outcome {
	outs, pending, repeats := g.sortClaims(ctx, claims)
	switch len(pending) {
	case 0: // no marker to write: no store call
	case 1:
		c := claims[pending[0]]
		out, cause := c.finish(ctx)
		outs[pending[0]], c.final = out, out
		c.report(ctx, out, cause, c.ran)
	default:
		errs := g.writeMarkers(ctx, claims, pending)
		for j, i := range pending {
			c := claims[i]
			out := completeOutcome(errs[j])
			outs[i], c.final = out, out
			c.stopHeartbeat(ctx)
			c.report(ctx, outs[i], errs[j], c.ran)
		}
	}
	for _, r := range repeats { // a claim listed twice is finished once
		outs[r[0]] = outs[r[1]]
	}
	return outs
}

// sortClaims sorts the claims given to Finish: it returns the outcomes of
// those it reports without a store call, the indexes of the pending ones
// (now finished: their final outcome is set with their marker) and, for a
// claim listed again, the index of each repeat with that of its first entry.
func (g *Guard) sortClaims(ctx context.Context, claims []*Claim) (outs []Outcome, pending []int, repeats [][2]int) {
	outs = make([]Outcome, len(claims))
	first := make(map[*Claim]int, len(claims))
	for i, c := range claims {
		if j, ok := first[c]; ok && c != nil {
			repeats = append(repeats, [2]int{i, j})
			continue
		}
		first[c] = i
		switch {
		case c == nil || c.state < claimWorking:
			outs[i] = Rejected
		case c.g != g:
			// Its marker belongs in its own Guard's store: left pending,
			// for that Guard's Finish.
			outs[i] = Rejected
			g.cfg.Logger.WarnContext(ctx, "jobonce: Finish was given a claim of another Guard; finish it with the Guard that claimed it",
				"key", c.job.Key)
		case c.state != claimPending:
			outs[i] = c.final
		default:
			c.state = claimFinished
			pending = append(pending, i)
		}
	}
	return outs, pending, repeats
}

// writeMarkers writes the done markers of the pending claims, in one round
// trip when the store is a driver.BatchStore, then retries those that
// failed side by side, so a marker that hangs takes none of the others'
// time. The retries share one StoreTimeout after the batch's own, so
// Finish answers within two store calls' bound however many claims it is
// given. It returns each marker's error, in pending's order.
func (g *Guard) writeMarkers(ctx context.Context, claims []*Claim, pending []int) []error {
	errs := make([]error, len(pending))
	var retry []int // indexes into pending
	if g.batch != nil {
		reqs := make([]driver.CompleteRequest, len(pending))
		for j, i := range pending {
			reqs[j] = claims[i].completeRequest()
		}
		sctx, cancel := context.WithTimeout(detach(ctx), g.cfg.StoreTimeout)
		_, answers := sendBatch(sctx, completeBatch(g.batch), reqs)
		cancel()
		// The store's slices stay the store's: a retry's answer goes in errs.
		copy(errs, answers)
		for j, err := range errs {
			if err != nil && !markerFinal(err) {
				retry = append(retry, j)
			}
		}
	} else {
		for j := range pending {
			retry = append(retry, j)
		}
	}
	rctx, cancel := context.WithTimeout(detach(ctx), g.cfg.StoreTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, j := range retry {
		// The batch's answer, if any, is the attempt made before; the retry
		// sends the claim's own request, not the one the store was handed.
		wg.Go(func() { _, errs[j] = g.retryCompleteWithin(rctx, claims[pending[j]].completeRequest(), errs[j]) })
	}
	wg.Wait()
	return errs
}

// completeRequest returns the request that writes the claim's done marker,
// with the job's result unless it is too large to store.
func (c *Claim) completeRequest() driver.CompleteRequest {
	result := c.value
	if c.unstored != nil {
		result = nil
	}
	return driver.CompleteRequest{Key: c.key, Token: c.token, Fingerprint: c.fp, Result: result, Retention: c.g.cfg.Retention, Fence: c.reply.Fence}
}

// finish writes the done marker (see complete), then stops the heartbeat
// that kept the claim alive meanwhile.
func (c *Claim) finish(ctx context.Context) (Outcome, error) {
	defer c.stopHeartbeat(ctx)
	return c.g.complete(ctx, c)
}

// complete writes the done marker, through the group commit when there is
// one, retrying store failures on its own; every attempt shares one
// StoreTimeout (a marker in a shared round trip that hangs may wait one
// more, as any call of the group commit). It runs even when ctx is
// cancelled: the effect happened.
func (g *Guard) complete(ctx context.Context, c *Claim) (Outcome, error) {
	req := c.completeRequest()
	sctx, cancel := context.WithTimeout(detach(ctx), g.cfg.StoreTimeout)
	defer cancel()
	if g.groupCommit != nil {
		// Queued behind round trips that others' calls keep busy, a marker
		// waits half its time at most, then makes its own round trip.
		_, err := g.groupCommit.doWithin(sctx, storeOp{complete: req}, g.cfg.StoreTimeout/2)
		if err == nil || markerFinal(err) || sctx.Err() != nil {
			return completeOutcome(err), err
		}
		return g.retryCompleteWithin(sctx, req, err)
	}
	return g.retryCompleteWithin(sctx, req, nil)
}

// retryCompleteWithin writes a done marker on its own, retrying store
// failures after completeBackoff until sctx, which the caller bounded, ends.
//
// prev is the error of an attempt made before, if any. Every attempt sends
// the same request: one that an earlier attempt wrote (its reply lost, or
// answered ErrUnreplicated) finds this claim's own marker, answered nil
// (and acknowledged anew), and one that finds another claim's marker, or
// none, is LeaseLost.
func (g *Guard) retryCompleteWithin(sctx context.Context, req driver.CompleteRequest, prev error) (Outcome, error) {
	for attempt := 0; ; attempt++ {
		if prev != nil || attempt > 0 {
			pause := time.NewTimer(completeBackoff[min(attempt, len(completeBackoff)-1)])
			select {
			case <-pause.C:
			case <-sctx.Done():
				pause.Stop()
				return completeOutcome(prev), prev
			}
		}
		err := g.storeComplete(sctx, req)
		if err == nil || markerFinal(err) || sctx.Err() != nil {
			return completeOutcome(err), err
		}
		prev = err
	}
}

// completeBackoff is the wait before each retry of a failed Complete; the
// last one repeats until the marker's StoreTimeout ends, so a marker
// outlasts a failover shorter than that.
var completeBackoff = [...]time.Duration{10 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond}

// markerFinal reports whether a failed done marker's write is final, not to
// be tried again: the token lost the key. (A marker written but not
// acknowledged, ErrUnreplicated, is sent again, as any other failure: the
// store knows its own marker.)
func markerFinal(err error) bool { return errors.Is(err, ErrLeaseLost) }

// completeOutcome returns the outcome of a job that succeeded under its
// claim, whose done marker's write ended with err.
func completeOutcome(err error) Outcome {
	switch {
	case err == nil:
		return Ran
	case errors.Is(err, ErrLeaseLost):
		return LeaseLost
	default:
		return Unrecorded
	}
}
