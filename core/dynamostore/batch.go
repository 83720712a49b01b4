package dynamostore

import (
	"context"
	"sync"

	"github.com/jobonce/jobonce/core/driver"
)

// Batch implements driver.BatchStore. It sends each done marker and claim
// as the conditional write that Complete or Claim sends, so each request
// gets its own answer. A key's requests go in order, and up to
// Config.BatchConcurrency keys at once, so a batch takes about one round
// trip.
func (s *Store) Batch(ctx context.Context, completes []driver.CompleteRequest, claims []driver.ClaimRequest) (replies []driver.ClaimReply, claimErrs, completeErrs []error) {
	replies = make([]driver.ClaimReply, len(claims))
	claimErrs = make([]error, len(claims))
	completeErrs = make([]error, len(completes))
	// One goroutine per key sends that key's requests in the batch's
	// order (done markers first), so the first claim of a key in a batch
	// is the one that may take it.
	var keys []string
	ops := make(map[string][]func())
	add := func(key string, f func()) {
		if _, ok := ops[key]; !ok {
			keys = append(keys, key)
		}
		ops[key] = append(ops[key], f)
	}
	for i := range completes {
		add(completes[i].Key, func() { completeErrs[i] = s.Complete(ctx, completes[i]) })
	}
	for i := range claims {
		add(claims[i].Key, func() { replies[i], claimErrs[i] = s.Claim(ctx, claims[i]) })
	}
	sem := make(chan struct{}, s.cfg.BatchConcurrency)
	var wg sync.WaitGroup
	for _, key := range keys {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			for _, f := range ops[key] {
				f()
			}
		})
	}
	wg.Wait()
	return replies, claimErrs, completeErrs
}
