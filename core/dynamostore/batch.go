package dynamostore

import (
	"bytes"
	"context"
	"errors"
	"sync"

	"github.com/jobonce/jobonce/core/driver"
)

// Batch implements driver.BatchStore. It sends each done marker, and the
// first claim of each key, as the conditional write that Complete or Claim
// sends, up to Config.BatchConcurrency keys at once, so a batch takes about
// one round trip. A key's done markers go first, in order. A later claim of
// a key is answered as the store answers it right after the first: the
// first's reply, Running under the claim that holds the key, or Claimed
// when it is that claim sent again. A hot key's copies then cost one write,
// not one each. A claim whose write failed for a cause of its own (an item
// too large) leaves the next claim of its key to be sent.
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
			s.claimKey(ctx, claims, k.claims, replies, claimErrs)
		})
	}
	wg.Wait()
	return replies, claimErrs, completeErrs
}

// claimKey answers the claims of one key at indexes idx, in order: it
// sends the first, and answers each later one from what the sent claim
// found, sending it instead when that is not known.
func (s *Store) claimKey(ctx context.Context, claims []driver.ClaimRequest, idx []int, replies []driver.ClaimReply, errs []error) {
	var (
		sent   *driver.ClaimRequest // the claim sent last, whose answer the next ones follow
		reply  driver.ClaimReply
		holder driver.Token
		err    error
	)
	for _, i := range idx {
		req := &claims[i]
		if sent != nil && followable(reply, holder, err) {
			replies[i], errs[i] = follow(sent, reply, holder, err, req)
			continue
		}
		reply, holder, err = s.claim(ctx, req)
		sent = req
		replies[i], errs[i] = reply, err
	}
}

// followable reports whether what a claim found (reply, holder and err) is
// the answer for the next claims of its key: an error not of the claim's
// own making, or a reply whose holder, if any, is known.
func followable(reply driver.ClaimReply, holder driver.Token, err error) bool {
	if err != nil {
		return !errors.Is(err, ErrItemTooLarge)
	}
	return reply.State == driver.StateDone || holder != (driver.Token{})
}

// follow answers claim req of a key whose claim sent, just before it, got
// reply (held by holder) or err.
func follow(sent *driver.ClaimRequest, reply driver.ClaimReply, holder driver.Token, err error, req *driver.ClaimRequest) (driver.ClaimReply, error) {
	switch {
	case err != nil:
		return driver.ClaimReply{}, err
	case reply.State == driver.StateDone:
		reply.Result = bytes.Clone(reply.Result)
		return reply, nil
	case req.Token == holder && reply.State == driver.StateClaimed:
		return reply, nil // the same claim sent again
	case req.Token == holder:
		// The claim that holds the key, sent again: Claim answers it so.
		return driver.ClaimReply{State: driver.StateClaimed, Fence: reply.Fence}, nil
	case reply.State == driver.StateClaimed:
		return driver.ClaimReply{State: driver.StateRunning, Fingerprint: sent.Fingerprint, Remaining: sent.Lease, Fence: reply.Fence}, nil
	}
	return reply, nil // Running under another claim
}
