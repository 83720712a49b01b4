package pgstore_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
)

// TestEnqueueBehindALockedRowIsNoPublish: an Enqueue whose claim waits
// past the store's LockTimeout for the key's row (another call taking the
// released key over, its commit held up) is answered running with
// Config.RetryAfter as its hint and no fingerprint. Under a Guard whose
// Lease is shorter than that hint, Enqueue took it for an earlier release's
// marker and reported the key published within the window (false, nil),
// though nobody had published it.
func TestEnqueueBehindALockedRowIsNoPublish(t *testing.T) {
	ctx := ctxT(t)
	s, pool := newStore(t, nil) // LockTimeout 100ms, RetryAfter 1s
	g, err := core.New(s, &core.Config{Lease: 500 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)

	published, err := g.Enqueue(ctx, "job", time.Hour, func(context.Context) error { return errors.New("broker down") })
	require.Error(t, err)
	require.False(t, published)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	var n int
	require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM (SELECT key FROM jobonce_keys FOR UPDATE) AS locked").Scan(&n))
	require.Equal(t, 1, n, "the released key's row is locked, as by a takeover not yet committed")
	published, err = g.Enqueue(ctx, "job", time.Hour, func(context.Context) error { return nil })
	require.NoError(t, tx.Rollback(ctx))
	require.False(t, published)
	require.ErrorIs(t, err, core.ErrRunning, "a key whose row could not be read was not published within the window")
}
