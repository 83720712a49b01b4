package core

import (
	"context"
	"errors"
	"fmt"

	"github.com/jobonce/jobonce/core/driver"
)

// Ready reports whether the Guard's store can be used now, for a health or
// readiness check: nil; an error matching ErrStoreRisk when the store can be
// reached but its settings can lose done markers (a redisstore made with
// Config.Strict); or one matching ErrStoreUnavailable that wraps the cause.
// It answers within ctx and StoreTimeout; when ctx ends first, the error
// matches ctx's. A store that does not implement driver.ReadyStore, such as
// memstore, is always ready.
func (g *Guard) Ready(ctx context.Context) error {
	store, ok := g.store.(driver.ReadyStore)
	if !ok {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, g.cfg.StoreTimeout)
	defer cancel()
	err := g.storeReady(sctx, store)
	if err == nil {
		return nil
	}
	if cerr := ended(ctx); cerr != nil {
		return fmt.Errorf("jobonce: core: Ready: %w: %w", cerr, err)
	}
	if errors.Is(err, ErrStoreRisk) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrStoreUnavailable, err)
}
