package pgstore

import (
	"cmp"
	"context"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobonce/jobonce/core/driver"
)

// keyOrder returns the indexes of keys sorted by key (stable), so that
// batches lock rows in one global order and never deadlock each other.
func keyOrder(n int, key func(int) string) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(key(a), key(b)) })
	return order
}

// Batch implements driver.BatchStore. It runs every complete and claim, as
// Complete and Claim would, in one round trip and one transaction. If one
// statement fails, none holds. The statements run in key order, so batches
// never deadlock each other. A claim whose key an uncommitted transaction
// holds is answered running, and the rest go again without it. After any
// other failure, each request left is sent again on its own.
func (s *Store) Batch(ctx context.Context, completes []driver.CompleteRequest, claims []driver.ClaimRequest) ([]driver.ClaimReply, []error, []error) {
	nc := len(completes)
	replies := make([]driver.ClaimReply, len(claims))
	errs := make([]error, nc+len(claims)) // completes, then claims
	settled := make([]bool, len(errs))
	key := func(i int) string {
		if i < nc {
			return completes[i].Key
		}
		return claims[i-nc].Key
	}
	queued := make([]int, 0, len(errs))
	for _, i := range keyOrder(len(errs), key) {
		var err error
		if i < nc {
			err = checkDuration("CompleteRequest.Retention", completes[i].Retention)
		} else {
			err = checkDuration("ClaimRequest.Lease", claims[i-nc].Lease)
		}
		if err != nil {
			errs[i], settled[i] = err, true
			continue
		}
		queued = append(queued, i)
	}
	for round := 1; len(queued) > 0 && round <= batchRounds; round++ {
		at, err := s.sendBatch(ctx, queued, nc, completes, claims, replies, errs, settled, false)
		if lookAgain(err) && ctx.Err() == nil {
			at, err = s.sendBatch(ctx, queued, nc, completes, claims, replies, errs, settled, true)
		}
		if err == nil || at < 0 || queued[at] < nc || !lockTimedOut(err) || ctx.Err() != nil {
			break
		}
		i := queued[at]
		replies[i-nc], settled[i] = driver.ClaimReply{State: driver.StateRunning, Remaining: s.cfg.RetryAfter}, true
		queued = slices.Delete(queued, at, at+1)
	}
	left := 0 // claims sent again on their own share the time left
	for i := nc; i < len(errs); i++ {
		if !settled[i] {
			left++
		}
	}
	for i := range errs {
		switch {
		case settled[i]:
		case i < nc:
			errs[i] = s.Complete(ctx, completes[i])
		default:
			replies[i-nc], errs[i] = s.claim(ctx, claims[i-nc], left)
			left--
		}
	}
	return replies, errs[nc:], errs[:nc:nc]
}

// batchRounds bounds the round trips of one Batch before the requests left
// are sent on their own: each round after the first follows a claim
// answered running on its lock wait.
const batchRounds = 4

// sendBatch sends the queued requests (indexes into completes, then claims
// after nc) in one pgx batch, in a READ COMMITTED transaction when
// inReadCommitted (see send), and records what it settled. When a statement
// fails, the transaction rolls back, so nothing is settled, and sendBatch
// returns the failure with the position in queued of the request whose
// statement failed (-1 when none did: the batch as a whole).
func (s *Store) sendBatch(ctx context.Context, queued []int, nc int, completes []driver.CompleteRequest, claims []driver.ClaimRequest,
	replies []driver.ClaimReply, errs []error, settled []bool, inReadCommitted bool,
) (int, error) {
	claimsQueued := 0
	for _, i := range queued {
		if i >= nc {
			claimsQueued++
		}
	}
	batch := newBatch(inReadCommitted)
	for _, i := range queued {
		if i < nc {
			batch.Queue(s.sql.complete, s.completeArgs(&completes[i])...)
		} else { // the statements' lock waits share the time left
			batch.Queue(s.sql.claim, s.claimArgs(ctx, &claims[i-nc], claimsQueued)...)
		}
	}
	at := -1
	failed := s.send(ctx, batch, inReadCommitted, func(br pgx.BatchResults) error {
		for k, i := range queued {
			var err error
			if i < nc {
				var tag pgconn.CommandTag
				if tag, err = br.Exec(); err == nil {
					settled[i] = true
					if tag.RowsAffected() == 0 {
						errs[i] = driver.ErrLeaseLost
					}
				}
			} else {
				var rows pgx.Rows
				if rows, err = br.Query(); err == nil {
					replies[i-nc], settled[i], err = scanClaim(rows)
				}
			}
			if err != nil {
				at = k
				return err
			}
		}
		return nil
	})
	if failed != nil {
		for _, i := range queued {
			settled[i], errs[i] = false, nil
		}
	}
	return at, failed
}
