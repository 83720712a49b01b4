package core

import (
	"context"
	"errors"

	"github.com/jobonce/jobonce/core/driver"
)

// release deletes our claim so a retry can run at once. Failure is harmless:
// the claim expires with its lease.
func (g *Guard) release(ctx context.Context, key string, token driver.Token) {
	sctx, cancel := context.WithTimeout(detach(ctx), g.cfg.StoreTimeout)
	defer cancel()
	g.releaseWithin(sctx, key, token)
}

// releaseWithin is release under a context the caller bounded.
func (g *Guard) releaseWithin(ctx context.Context, key string, token driver.Token) {
	if err := g.storeRelease(ctx, key, token); err != nil && !errors.Is(err, ErrLeaseLost) {
		g.cfg.Logger.WarnContext(ctx, "jobonce: release failed; the claim expires with its lease",
			"key", key, "error", err)
	}
}
