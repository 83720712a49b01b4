package core_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/memstore"
)

// readyStore is a store whose Ready answers ready.
type readyStore struct {
	*memstore.Store
	ready func(ctx context.Context) error
}

func (s *readyStore) Ready(ctx context.Context) error { return s.ready(ctx) }

var _ driver.ReadyStore = (*readyStore)(nil)

func readyGuard(t *testing.T, cfg *core.Config, ready func(ctx context.Context) error) *core.Guard {
	t.Helper()
	g, err := core.New(&readyStore{Store: memstore.New(), ready: ready}, cfg)
	require.NoError(t, err)
	return g
}

// A store that does not tell whether it is ready, such as memstore, is
// taken as ready.
func TestReadyTakesAStoreWithoutReadyAsReady(t *testing.T) {
	t.Parallel()
	g, err := core.New(memstore.New(), nil)
	require.NoError(t, err)
	require.NoError(t, g.Ready(context.Background()))
}

// Ready classifies what the store answers: nil is ready, a risk stays a
// risk (ErrStoreRisk, not ErrStoreUnavailable), and every other failure, a
// panic included, is ErrStoreUnavailable wrapping the cause.
func TestReadyTellsARiskFromAnUnavailableStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	require.NoError(t, readyGuard(t, nil, func(context.Context) error { return nil }).Ready(ctx))

	risk := fmt.Errorf("redis: maxmemory-policy allkeys-lru: %w", driver.ErrStoreRisk)
	err := readyGuard(t, nil, func(context.Context) error { return risk }).Ready(ctx)
	require.ErrorIs(t, err, core.ErrStoreRisk)
	require.NotErrorIs(t, err, core.ErrStoreUnavailable)
	require.Equal(t, risk.Error(), err.Error())

	refused := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	err = readyGuard(t, nil, func(context.Context) error { return refused }).Ready(ctx)
	require.ErrorIs(t, err, core.ErrStoreUnavailable)
	require.ErrorIs(t, err, refused)
	require.NotErrorIs(t, err, core.ErrStoreRisk)

	err = readyGuard(t, nil, func(context.Context) error { panic("boom") }).Ready(ctx)
	require.ErrorIs(t, err, core.ErrStoreUnavailable)
	require.ErrorContains(t, err, "boom")
}

// A store that does not answer is bounded by StoreTimeout: Ready answers
// ErrStoreUnavailable wrapping the deadline while the caller's context is
// live.
func TestReadyAnswersWithinStoreTimeout(t *testing.T) {
	t.Parallel()
	g := readyGuard(t, &core.Config{StoreTimeout: 50 * time.Millisecond}, func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	})
	start := time.Now()
	err := g.Ready(context.Background())
	require.Less(t, time.Since(start), 5*time.Second, "bounded by StoreTimeout")
	require.ErrorIs(t, err, core.ErrStoreUnavailable)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// The caller's own cancellation is reported as that, never as the store
// being unavailable or at risk.
func TestReadyReportsTheCallersCancellationAsCanceled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	g := readyGuard(t, nil, func(sctx context.Context) error {
		cancel()
		<-sctx.Done()
		return fmt.Errorf("ping: %w", sctx.Err())
	})
	err := g.Ready(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, core.ErrStoreUnavailable)
}
