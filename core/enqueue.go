package core

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Enqueue publishes a job at most once per key within window: it sets a
// marker for the key (under the prefix plus "enq:") only if none exists, then
// calls publish. If publish fails, Enqueue deletes its own marker, so an
// outage never blocks the job for the whole window, and returns publish's
// error unchanged. It reports whether publish ran and succeeded; false with a
// nil error means the key was published within the window already.
//
// When the store cannot be reached, Enqueue returns an error matching
// ErrStoreUnavailable without publishing, or publishes anyway with FailOpen.
func (g *Guard) Enqueue(ctx context.Context, key string, window time.Duration, publish func(context.Context) error) (bool, error) {
	if window <= 0 {
		return false, fmt.Errorf("jobonce: Enqueue window must be positive, got %s", window)
	}
	if publish == nil {
		return false, errors.New("jobonce: Enqueue publish function is nil")
	}
	skey, err := StoredKey(g.cfg.KeyPrefix+"enq:", key, g.cfg.PlainKeys)
	if err != nil {
		return false, err
	}
	token := NewToken()
	reply, err := g.store.Claim(ctx, ClaimRequest{Key: skey, Token: token, Lease: window})
	if err != nil {
		if !g.cfg.FailOpen {
			return false, fmt.Errorf("%w: %w", ErrStoreUnavailable, err)
		}
		g.cfg.Logger.WarnContext(ctx, "jobonce: store unavailable; publishing without a marker (FailOpen)", "key", key, "error", err)
		if err := publish(ctx); err != nil {
			return false, err
		}
		return true, nil
	}
	if reply.State != StateClaimed {
		return false, nil
	}
	if err := publish(ctx); err != nil {
		g.release(ctx, skey, token)
		return false, err
	}
	return true, nil
}
