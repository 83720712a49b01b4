package core_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/memstore"
)

// fakeTx is a transaction of fakeTxStore: the claim it holds until commit.
type fakeTx struct {
	key   string
	token driver.Token
	done  bool
}

// fakeTxStore gives a memstore a transactional mode whose commit can fail.
// It serves the unit test of how the TxGuard reports a failed commit; the
// real transactional mode is tested on PostgreSQL in core/pgstore.
type fakeTxStore struct {
	*memstore.Store
	commitErr error
}

func (s *fakeTxStore) RecordTx(ctx context.Context, tx *fakeTx, req driver.RecordRequest) (driver.ClaimReply, error) {
	tok := driver.NewToken()
	reply, err := s.Claim(ctx, driver.ClaimRequest{Key: req.Key, Token: tok, Fingerprint: req.Fingerprint, Lease: time.Minute})
	if err == nil && reply.State == driver.StateClaimed {
		tx.key, tx.token = req.Key, tok
	}
	return reply, err
}

func (s *fakeTxStore) BeginTx(context.Context) (*fakeTx, error) { return &fakeTx{}, nil }

func (s *fakeTxStore) CommitTx(ctx context.Context, tx *fakeTx) error {
	if s.commitErr != nil {
		return s.commitErr // the transaction did not commit; RollbackTx ends it
	}
	tx.done = true
	return s.Complete(ctx, driver.CompleteRequest{Key: tx.key, Token: tx.token, Retention: time.Hour})
}

func (s *fakeTxStore) RollbackTx(ctx context.Context, tx *fakeTx) error {
	if tx.done || tx.key == "" {
		return nil
	}
	return s.Release(ctx, tx.key, tx.token)
}

// TestTxGuardReportsAFailedCommit: a commit that fails is Failed with the
// commit's error, and leaves the key free for a retry, which runs.
func TestTxGuardReportsAFailedCommit(t *testing.T) {
	lost := errors.New("serialization failure at commit")
	store := &fakeTxStore{Store: memstore.New(), commitErr: lost}
	g, err := core.New(store, &core.Config{StoreTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	txg, err := core.NewTxGuard[*fakeTx](g)
	require.NoError(t, err)
	ctx := context.Background()
	out, err := txg.Do(ctx, "k", func(context.Context, *fakeTx) error { return nil })
	require.Equal(t, core.Failed, out)
	require.ErrorIs(t, err, lost)
	store.commitErr = nil
	out, err = txg.Do(ctx, "k", func(context.Context, *fakeTx) error { return nil })
	require.NoError(t, err)
	require.Equal(t, core.Ran, out)
	out, err = txg.Do(ctx, "k", func(context.Context, *fakeTx) error { return nil })
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, out)
}

// TestTxGuardLoggerIsTheGuards: a TxGuard reports on its Guard's logger.
func TestTxGuardLoggerIsTheGuards(t *testing.T) {
	t.Parallel()
	g, err := core.New(&fakeTxStore{Store: memstore.New()}, nil)
	require.NoError(t, err)
	txg, err := core.NewTxGuard[*fakeTx](g)
	require.NoError(t, err)
	require.Same(t, g.Logger(), txg.Logger())
}
