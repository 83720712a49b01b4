package core

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/internal/heartbeat"
	"github.com/jobonce/jobonce/internal/storecall"
	"github.com/jobonce/jobonce/internal/storedkey"
)

// enqueueSource is the Source of the events Enqueue reports in shadow mode.
const enqueueSource = "enqueue"

// enqueueFingerprint is the fingerprint of Enqueue's claims. A claim
// without it, with more lease left than Config.Lease, is a marker of an
// earlier release, which held the key as a claim for the whole window
// (see earlierMarker).
const enqueueFingerprint = "enqueue"

// Enqueue calls publish at most once per key within window. It returns
// false and a nil error when the key was published within the window. A
// failed publish releases the key and returns its error unchanged. While
// another call publishes the key, the error matches ErrRunning. When the
// store fails, nothing is published and the error matches
// ErrStoreUnavailable. docs/semantics.md lists the other cases.
func (g *Guard) Enqueue(ctx context.Context, key string, window time.Duration, publish func(context.Context) error) (bool, error) {
	if window < time.Millisecond {
		return false, fmt.Errorf("jobonce: core: Enqueue: window must be at least 1ms, got %s", window)
	}
	if publish == nil {
		return false, errors.New("jobonce: core: Enqueue: publish function is nil")
	}
	skey, ok := storedkey.Enqueue(g.cfg.KeyPrefix, key)
	if !ok {
		err := errEmptyKey
		if g.cfg.Shadow && ctx.Err() == nil {
			return g.publishShadow(ctx, key, publish, Rejected, err)
		}
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("jobonce: Enqueue stopped by the caller's context: %w", err)
	}
	token := driver.NewToken()
	started := time.Now()
	sctx, cancel := context.WithTimeout(ctx, g.cfg.StoreTimeout)
	reply, err := g.store.Claim(sctx, driver.ClaimRequest{Key: skey, Token: token, Fingerprint: enqueueFingerprint, Lease: g.cfg.Lease})
	cancel()
	if done := storecall.Ended(ctx); done != nil {
		if err != nil || reply.State == driver.StateClaimed {
			g.store.Release(ctx, skey, token) // the store may have written it
		}
		return false, fmt.Errorf("jobonce: Enqueue stopped by the caller's context: %w", done)
	}
	if err != nil {
		if g.cfg.FailOpen && unreachable(ctx, err) {
			g.cfg.Logger.WarnContext(ctx, "jobonce: store unavailable; publishing without a marker (FailOpen)", "key", key, "error", err)
			if err := publish(ctx); err != nil {
				g.obs.recordFailOpen(ctx, Failed, enqueueSource, "")
				return false, err
			}
			g.obs.recordFailOpen(ctx, Unguarded, enqueueSource, "")
			return true, nil
		}
		// The claim may have been written though its answer was lost or
		// late: the retry of a caller told the store failed must not find
		// it held. The release is token-checked, so it deletes this call's
		// claim or nothing.
		g.store.Release(ctx, skey, token)
		return g.notPublished(ctx, key, publish, Unavailable, fmt.Errorf("%w: %w", ErrStoreUnavailable, err))
	}
	switch reply.State {
	case driver.StateClaimed:
	case driver.StateDone:
		return g.notPublished(ctx, key, publish, Duplicate, nil)
	case driver.StateRunning:
		if g.earlierMarker(reply) {
			return g.notPublished(ctx, key, publish, Duplicate, nil)
		}
		err := fmt.Errorf("jobonce: Enqueue: key %q is being published by another call: %w",
			key, &RunningError{RetryAfter: retryAfter(&g.cfg, g.obs, Job{Key: key}, reply)})
		return g.notPublished(ctx, key, publish, Running, err)
	default:
		err := fmt.Errorf("%w: store replied with unknown state %d", ErrStoreUnavailable, reply.State)
		return g.notPublished(ctx, key, publish, Unavailable, err)
	}
	if after := time.Since(started); after >= g.cfg.Lease/2 {
		// The claim may lapse before the heartbeat renews it, and another
		// call publish alongside.
		g.store.Release(ctx, skey, token)
		err := fmt.Errorf("%w: the claim was answered %s after it was sent, past half its lease (%s)", ErrStoreUnavailable, after.Round(time.Millisecond), g.cfg.Lease)
		return g.notPublished(ctx, key, publish, Unavailable, err)
	}
	return g.publishClaimed(ctx, key, driver.CompleteRequest{Key: skey, Token: token, Retention: window, Fence: reply.Fence}, started, publish)
}

// earlierMarker reports whether a running claim Enqueue found is the marker
// of an earlier release: a claim read from the store (its fence known) with
// no fingerprint, and more lease left than any claim of this Guard's Enqueue
// has. A key the store could not read, such as a row another transaction
// locked past pgstore's LockTimeout, is answered running with no fence and
// only a retry hint left, which is no publish.
func (g *Guard) earlierMarker(reply driver.ClaimReply) bool {
	return reply.Fingerprint == "" && reply.Fence > 0 && reply.Remaining > g.cfg.Lease
}

// notPublished answers an Enqueue that enforcement does not publish: with
// outcome would's error err (nil for a key published within the window),
// or in shadow mode by publishing all the same (see publishShadow).
func (g *Guard) notPublished(ctx context.Context, key string, publish func(context.Context) error, would Outcome, err error) (bool, error) {
	if g.cfg.Shadow {
		return g.publishShadow(ctx, key, publish, would, err)
	}
	return false, err
}

// publishClaimed publishes under the claim req names, which the heartbeat
// keeps alive (the lease runs from started), and then writes the marker
// req describes; a failed or panicking publish releases the claim.
func (g *Guard) publishClaimed(ctx context.Context, key string, req driver.CompleteRequest, started time.Time, publish func(context.Context) error) (bool, error) {
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	hb := heartbeat.Start(pctx, g.heartbeat, req.Key, req.Token, started, cancel)
	published := false
	defer func() {
		if !published { // publish failed or panicked: the job was not published
			hb.Stop()
			g.store.Release(ctx, req.Key, req.Token)
		}
	}()
	if err := publish(pctx); err != nil {
		return false, err
	}
	published = true
	sctx, scancel := context.WithTimeout(storecall.Detach(ctx), g.cfg.StoreTimeout)
	err := g.store.CompleteWithin(sctx, req, nil)
	scancel()
	hb.Stop()
	if err != nil {
		g.cfg.Logger.WarnContext(ctx, "jobonce: published, but the marker could not be written; a later Enqueue of the key may publish it again once its claim lapses",
			"key", key, "error", err)
	}
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
	g.obs.observe(ctx, e, nil)
	return err == nil, err
}
