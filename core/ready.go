package core

import (
	"context"
	"errors"
	"fmt"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/internal/storecall"
)

// Ready reports whether the store can be used now, for a health check. The
// error matches ErrStoreRisk when its settings can lose done markers, else
// ErrStoreUnavailable, or ctx.Err() when ctx ended first. A store without
// driver.ReadyStore, such as memstore, is always ready.
func (g *Guard) Ready(ctx context.Context) error {
	store, ok := g.store.Driver.(driver.ReadyStore)
	if !ok {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, g.cfg.StoreTimeout)
	defer cancel()
	err := g.store.Ready(sctx, store)
	if err == nil {
		err = g.probe(sctx)
	}
	if err == nil {
		return nil
	}
	if cerr := storecall.Ended(ctx); cerr != nil {
		return fmt.Errorf("jobonce: core: Ready: %w: %w", cerr, err)
	}
	if errors.Is(err, ErrStoreRisk) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrStoreUnavailable, err)
}

// probe claims the Guard's ready key and releases it: the store's answer
// to a claim is what every job needs. The key held by another call of
// Ready, of this Guard or another, is an answer too.
func (g *Guard) probe(ctx context.Context) error {
	key, token := probeKey(g.cfg.KeyPrefix), driver.NewToken()
	reply, err := g.store.Claim(ctx, driver.ClaimRequest{Key: key, Token: token, Lease: g.cfg.Lease})
	if err != nil {
		return fmt.Errorf("jobonce: core: Ready: a claim of the key %q failed: %w", key, err)
	}
	if reply.State == driver.StateClaimed {
		if err := g.store.TryRelease(ctx, key, token); err != nil && !errors.Is(err, ErrLeaseLost) {
			return fmt.Errorf("jobonce: core: Ready: the release of the key %q failed: %w", key, err)
		}
	}
	return nil
}

// probeKey returns the stored key Ready claims under prefix: "#ready", one
// key for every Guard of the prefix, so that a store that keeps released
// rows (pgstore, until Prune) keeps one. No job key is stored under it: a
// plain key that starts with "#" is stored as "#" and 43 characters, and a
// hashed one as 20 characters.
func probeKey(prefix string) string { return prefix + "#ready" }
