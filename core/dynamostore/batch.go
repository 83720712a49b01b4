package dynamostore

import (
	"bytes"
	"context"
	"sync"

	"github.com/jobonce/jobonce/core/driver"
)

// Batch implements driver.BatchStore. It sends each done marker, and the
// first valid claim of each key, as the conditional write that Complete or
// Claim sends, up to Config.BatchConcurrency keys at once, so a batch takes
// about one round trip. A key's done markers go first, in order. A later
// claim of a key is answered as the store answers it right after the
// first: the first's reply, or Running under the first's claim when that
// claim took the key. A hot key's copies then cost one write, not one each.
func (s *Store) Batch(ctx context.Context, completes []driver.CompleteRequest, claims []driver.ClaimRequest) (replies []driver.ClaimReply, claimErrs, completeErrs []error) {
	replies = make([]driver.ClaimReply, len(claims))
	claimErrs = make([]error, len(claims))
	completeErrs = make([]error, len(completes))
	type keyOps struct{ completes, claims []int }
	var keys []string
	ops := make(map[string]*keyOps)
	of := func(key string) *keyOps {
		k, ok := ops[key]
		if !ok {
			k = &keyOps{}
			ops[key] = k
			keys = append(keys, key)
		}
		return k
	}
	for i := range completes {
		k := of(completes[i].Key)
		k.completes = append(k.completes, i)
	}
	for i := range claims {
		if err := checkClaim(&claims[i]); err != nil {
			claimErrs[i] = err
			continue
		}
		k := of(claims[i].Key)
		k.claims = append(k.claims, i)
	}
	sem := make(chan struct{}, s.cfg.BatchConcurrency)
	var wg sync.WaitGroup
	for _, key := range keys {
		k := ops[key]
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			for _, i := range k.completes {
				completeErrs[i] = s.Complete(ctx, completes[i])
			}
			if len(k.claims) == 0 {
				return
			}
			first := k.claims[0]
			replies[first], claimErrs[first] = s.Claim(ctx, claims[first])
			for _, i := range k.claims[1:] {
				replies[i], claimErrs[i] = after(&claims[first], replies[first], claimErrs[first], &claims[i])
			}
		})
	}
	wg.Wait()
	return replies, claimErrs, completeErrs
}

// after answers claim req of a key whose claim first, sent just before it,
// got reply and err: the same answer, except that a claim of another token
// finds the key Running under first when first took it.
func after(first *driver.ClaimRequest, reply driver.ClaimReply, err error, req *driver.ClaimRequest) (driver.ClaimReply, error) {
	if err != nil {
		return driver.ClaimReply{}, err
	}
	if reply.State == driver.StateClaimed && req.Token != first.Token {
		return driver.ClaimReply{State: driver.StateRunning, Fingerprint: first.Fingerprint, Remaining: first.Lease, Fence: reply.Fence}, nil
	}
	reply.Result = bytes.Clone(reply.Result)
	return reply, nil
}
