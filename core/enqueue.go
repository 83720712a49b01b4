package core

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobonce/jobonce/core/driver"
)

// Enqueue publishes a job at most once per key within window: it sets a
// marker for the key (under the prefix plus "enq#" and the key's hash) only if none exists, then
// calls publish. If publish fails, Enqueue deletes its own marker, so an
// outage never blocks the job for the whole window, and returns publish's
// error unchanged. It reports whether publish ran and succeeded; false with a
// nil error means the key was published within the window already.
//
// When the store cannot be reached, Enqueue returns an error matching
// ErrStoreUnavailable without publishing, or publishes anyway with FailOpen.
// When ctx ends first, the error matches ctx.Err() and nothing is published.
func (g *Guard) Enqueue(ctx context.Context, key string, window time.Duration, publish func(context.Context) error) (bool, error) {
	if window < time.Millisecond {
		return false, fmt.Errorf("jobonce: Enqueue window must be at least 1ms, got %s", window)
	}
	if publish == nil {
		return false, errors.New("jobonce: Enqueue publish function is nil")
	}
	skey, err := enqueueKey(g.cfg.KeyPrefix, key)
	if err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("jobonce: Enqueue stopped by the caller's context: %w", err)
	}
	token := driver.NewToken()
	sctx, cancel := context.WithTimeout(ctx, g.cfg.StoreTimeout)
	reply, err := g.storeClaim(sctx, driver.ClaimRequest{Key: skey, Token: token, Lease: window})
	cancel()
	if ctx.Err() != nil {
		if err == nil && reply.State == driver.StateClaimed {
			g.release(ctx, skey, token)
		}
		return false, fmt.Errorf("jobonce: Enqueue stopped by the caller's context: %w", ctx.Err())
	}
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
	switch reply.State {
	case driver.StateClaimed:
	case driver.StateRunning, driver.StateDone:
		return false, nil
	default:
		return false, fmt.Errorf("%w: store replied with unknown state %d", ErrStoreUnavailable, reply.State)
	}
	published := false
	defer func() {
		if !published { // publish failed or panicked: the job was not published
			g.release(ctx, skey, token)
		}
	}()
	if err := publish(ctx); err != nil {
		return false, err
	}
	published = true
	return true, nil
}
