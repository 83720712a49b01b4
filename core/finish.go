package core

import (
	"context"
	"sync"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/internal/storecall"
)

// Finish writes the done markers of the claims Work left pending, in one
// round trip on a driver.BatchStore. It returns each claim's final outcome,
// in order. A nil claim, one without Work, or one of another Guard is
// Rejected.
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
	if g.store.Batcher != nil {
		reqs := make([]driver.CompleteRequest, len(pending))
		for j, i := range pending {
			reqs[j] = claims[i].completeRequest()
		}
		sctx, cancel := context.WithTimeout(storecall.Detach(ctx), g.cfg.StoreTimeout)
		answers := g.store.CompleteBatch(sctx, reqs)
		cancel()
		// The store's slices stay the store's: a retry's answer goes in errs.
		copy(errs, answers)
		for j, err := range errs {
			if err != nil && !storecall.MarkerFinal(err) {
				retry = append(retry, j)
			}
		}
	} else {
		for j := range pending {
			retry = append(retry, j)
		}
	}
	rctx, cancel := context.WithTimeout(storecall.Detach(ctx), g.cfg.StoreTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, j := range retry {
		// The batch's answer, if any, is the attempt made before; the retry
		// sends the claim's own request, not the one the store was handed.
		wg.Go(func() { errs[j] = g.store.CompleteWithin(rctx, claims[pending[j]].completeRequest(), errs[j]) })
	}
	wg.Wait()
	return errs
}
