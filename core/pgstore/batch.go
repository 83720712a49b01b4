package pgstore

import (
	"cmp"
	"context"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/jobonce/jobonce/core"
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

// ClaimBatch implements driver.BatchStore: every request is claimed as Claim
// would, in one round trip. The statements share one implicit transaction;
// if any of them fails, every request is claimed again on its own.
func (s *Store) ClaimBatch(ctx context.Context, reqs []driver.ClaimRequest) ([]driver.ClaimReply, []error) {
	replies := make([]driver.ClaimReply, len(reqs))
	errs := make([]error, len(reqs))
	settled := make([]bool, len(reqs))
	order := keyOrder(len(reqs), func(i int) string { return reqs[i].Key })

	batch := &pgx.Batch{}
	queued := make([]int, 0, len(order))
	for _, i := range order {
		if err := checkDuration("ClaimRequest.Lease", reqs[i].Lease); err != nil {
			errs[i], settled[i] = err, true
			continue
		}
		queued = append(queued, i)
	}
	for _, i := range queued { // the statements' lock waits share the time left
		batch.Queue(s.sql.claim, s.claimArgs(ctx, &reqs[i], len(queued))...)
	}
	if len(queued) > 0 {
		br := s.pool.SendBatch(ctx, batch)
		var failed error
		for _, i := range queued {
			rows, err := br.Query()
			if err == nil {
				replies[i], settled[i], err = scanClaim(rows)
			}
			if err != nil {
				failed = err
				break
			}
		}
		if err := br.Close(); failed == nil {
			failed = err
		}
		if failed != nil {
			// The implicit transaction rolled back: none of the claims holds.
			for _, i := range queued {
				settled[i] = false
			}
		}
	}
	left := 0
	for i := range reqs {
		if !settled[i] {
			left++
		}
	}
	for i := range reqs {
		if !settled[i] {
			replies[i], errs[i] = s.claim(ctx, reqs[i], left)
			left--
		}
	}
	return replies, errs
}

// CompleteBatch implements driver.BatchStore: every request is completed as
// Complete would, in one round trip. If any statement fails, every request
// is completed again on its own.
func (s *Store) CompleteBatch(ctx context.Context, reqs []driver.CompleteRequest) []error {
	errs := make([]error, len(reqs))
	done := make([]bool, len(reqs))
	order := keyOrder(len(reqs), func(i int) string { return reqs[i].Key })

	batch := &pgx.Batch{}
	queued := make([]int, 0, len(order))
	for _, i := range order {
		if err := checkDuration("CompleteRequest.Retention", reqs[i].Retention); err != nil {
			errs[i], done[i] = err, true
			continue
		}
		batch.Queue(s.sql.complete, s.completeArgs(&reqs[i])...)
		queued = append(queued, i)
	}
	if len(queued) > 0 {
		br := s.pool.SendBatch(ctx, batch)
		var failed error
		for _, i := range queued {
			tag, err := br.Exec()
			if err != nil {
				failed = err
				break
			}
			done[i] = true
			if tag.RowsAffected() == 0 {
				errs[i] = core.ErrLeaseLost
			}
		}
		if err := br.Close(); failed == nil {
			failed = err
		}
		if failed != nil {
			for _, i := range queued {
				done[i], errs[i] = false, nil
			}
		}
	}
	for i := range reqs {
		if !done[i] {
			errs[i] = s.Complete(ctx, reqs[i])
		}
	}
	return errs
}
