package groupcommit

import (
	"context"
	"time"

	"github.com/jobonce/jobonce/core/driver"
)

// Op is one call of a store's group commit: a claim, or a done marker.
type Op struct {
	claim    driver.ClaimRequest
	complete driver.CompleteRequest
	isClaim  bool
}

// Claim returns the Op that sends req.
func Claim(req driver.ClaimRequest) Op { return Op{claim: req, isClaim: true} }

// Complete returns the Op that writes req's done marker.
func Complete(req driver.CompleteRequest) Op { return Op{complete: req} }

// ForStore returns the group commit of a Guard on bs: claims and done
// markers share its round trips, RoundTrips of them in flight at most, each
// bounded by timeout. A done marker's answer is its error alone.
func ForStore(bs driver.BatchStore, timeout time.Duration) *Group[Op, driver.ClaimReply] {
	return New(func(ctx context.Context, op Op) (driver.ClaimReply, error) {
		if op.isClaim {
			return bs.Claim(ctx, op.claim)
		}
		return driver.ClaimReply{}, bs.Complete(ctx, op.complete)
	}, func(ctx context.Context, ops []Op) ([]driver.ClaimReply, []error) {
		var claims []driver.ClaimRequest
		var completes []driver.CompleteRequest
		for _, op := range ops {
			if op.isClaim {
				claims = append(claims, op.claim)
			} else {
				completes = append(completes, op.complete)
			}
		}
		replies, claimErrs, completeErrs := bs.Batch(ctx, completes, claims)
		if len(replies) != len(claims) || len(claimErrs) != len(claims) || len(completeErrs) != len(completes) {
			return nil, nil // storecall.Batch fails every call
		}
		outs, errs := make([]driver.ClaimReply, len(ops)), make([]error, len(ops))
		var j, k int
		for i, op := range ops {
			if op.isClaim {
				outs[i], errs[i] = replies[j], claimErrs[j]
				j++
			} else {
				errs[i] = completeErrs[k]
				k++
			}
		}
		return outs, errs
	}, timeout, RoundTrips)
}
