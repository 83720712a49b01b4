package core

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobonce/jobonce/core/driver"
)

// enqueueSource is the Source of the events Enqueue reports in shadow mode.
const enqueueSource = "enqueue"

// Enqueue publishes a job at most once per key within window: it sets a
// marker for the key (under the prefix plus "enq#" and the key's hash) only if none exists, then
// calls publish. If publish fails, Enqueue deletes its own marker, so an
// outage never blocks the job for the whole window, and returns publish's
// error unchanged. It reports whether publish ran and succeeded; false with a
// nil error means the key was published within the window already.
//
// When the store fails, Enqueue deletes the marker it may have written
// (token-checked: a second bounded store call), so a retry is not skipped,
// and returns an error matching ErrStoreUnavailable without publishing;
// with FailOpen, it publishes anyway
// when the store could not be reached (not when it answered with an error:
// see Config.FailOpen). When ctx ends first, the error matches ctx.Err()
// and nothing is published.
//
// In shadow mode (Config.Shadow), Enqueue publishes every call, also those
// it would skip (the key published within the window, an empty key, a
// store failure), and reports each of those to the observer, the log and
// the metrics (jobonce.shadow.skips) as Unguarded (or Failed, when publish
// failed) with Event.Source "enqueue" and Event.WouldSkip the outcome
// enforcement would give: Duplicate, Rejected or Unavailable.
func (g *Guard) Enqueue(ctx context.Context, key string, window time.Duration, publish func(context.Context) error) (bool, error) {
	if window < time.Millisecond {
		return false, fmt.Errorf("jobonce: core: Enqueue: window must be at least 1ms, got %s", window)
	}
	if publish == nil {
		return false, errors.New("jobonce: core: Enqueue: publish function is nil")
	}
	skey, err := enqueueKey(g.cfg.KeyPrefix, key)
	if err != nil {
		if g.cfg.Shadow && ctx.Err() == nil {
			return g.publishShadow(ctx, key, publish, Rejected, err)
		}
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("jobonce: Enqueue stopped by the caller's context: %w", err)
	}
	token := driver.NewToken()
	sctx, cancel := context.WithTimeout(ctx, g.cfg.StoreTimeout)
	reply, err := g.storeClaim(sctx, driver.ClaimRequest{Key: skey, Token: token, Lease: window})
	cancel()
	if done := ended(ctx); done != nil {
		if err != nil || reply.State == driver.StateClaimed {
			g.release(ctx, skey, token) // the store may have written it
		}
		return false, fmt.Errorf("jobonce: Enqueue stopped by the caller's context: %w", done)
	}
	if err != nil {
		if g.cfg.FailOpen && unreachable(ctx, err) {
			g.cfg.Logger.WarnContext(ctx, "jobonce: store unavailable; publishing without a marker (FailOpen)", "key", key, "error", err)
			if err := publish(ctx); err != nil {
				return false, err
			}
			return true, nil
		}
		// The marker may have been written though its answer was lost or
		// late: the retry of a caller told the store failed must not find it
		// and skip the job for the whole window. The release is
		// token-checked, so it deletes this call's marker or nothing.
		g.release(ctx, skey, token)
		err = fmt.Errorf("%w: %w", ErrStoreUnavailable, err)
		if g.cfg.Shadow {
			return g.publishShadow(ctx, key, publish, Unavailable, err)
		}
		return false, err
	}
	switch reply.State {
	case driver.StateClaimed:
	case driver.StateRunning, driver.StateDone:
		if g.cfg.Shadow {
			return g.publishShadow(ctx, key, publish, Duplicate, nil)
		}
		return false, nil
	default:
		err := fmt.Errorf("%w: store replied with unknown state %d", ErrStoreUnavailable, reply.State)
		if g.cfg.Shadow {
			return g.publishShadow(ctx, key, publish, Unavailable, err)
		}
		return false, err
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

// publishShadow publishes, in shadow mode, a job that enforcement would
// not publish, giving outcome would (and error cause), and reports it:
// Unguarded, or Failed with publish's error, with Event.WouldSkip set.
func (g *Guard) publishShadow(ctx context.Context, key string, publish func(context.Context) error, would Outcome, cause error) (bool, error) {
	e := Event{Key: key, Source: enqueueSource, Outcome: Unguarded, Err: cause, WouldSkip: would}
	start := time.Now()
	err := publish(ctx)
	e.Duration = time.Since(start)
	if err != nil {
		e.Outcome, e.Err = Failed, err
	}
	g.observe(ctx, e, false)
	return err == nil, err
}
