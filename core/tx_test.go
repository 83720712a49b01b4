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

// fakeTxStore gives a memstore a transactional mode whose commit can fail
// after it took effect (its answer lost) or without taking effect. It
// serves the unit tests of how the TxGuard reads a failed commit; the real
// transactional mode is tested on PostgreSQL in core/pgstore.
type fakeTxStore struct {
	*memstore.Store
	commitErr  error
	commitTook bool // the failed commit took effect all the same
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
	tx.done = true
	if s.commitErr != nil && !s.commitTook { // a failed commit ends the transaction
		if err := s.Release(ctx, tx.key, tx.token); err != nil {
			return err
		}
		return s.commitErr
	}
	if err := s.Complete(ctx, driver.CompleteRequest{Key: tx.key, Token: tx.token, Retention: time.Hour}); err != nil {
		return err
	}
	return s.commitErr
}

func (s *fakeTxStore) RollbackTx(ctx context.Context, tx *fakeTx) error {
	if tx.done || tx.key == "" {
		return nil
	}
	return s.Release(ctx, tx.key, tx.token)
}

// TestTxGuardReadsAFailedCommit: a commit whose answer was lost after it
// took effect is Ran (the TxGuard finds the key done), one that did not take
// effect is Failed with the commit's error and leaves the key free.
func TestTxGuardReadsAFailedCommit(t *testing.T) {
	lost := errors.New("connection reset during COMMIT")
	for _, c := range []struct {
		name  string
		took  bool
		want  core.Outcome
		again core.Outcome
	}{
		{"answer lost", true, core.Ran, core.Duplicate},
		{"commit failed", false, core.Failed, core.Ran},
	} {
		store := &fakeTxStore{Store: memstore.New(), commitErr: lost, commitTook: c.took}
		g, err := core.New(store, &core.Config{StoreTimeout: 200 * time.Millisecond})
		require.NoError(t, err)
		txg, err := core.NewTxGuard[*fakeTx](g)
		require.NoError(t, err)
		ctx := context.Background()
		out, err := txg.Do(ctx, "k", func(context.Context, *fakeTx) error { return nil })
		require.Equal(t, c.want, out, c.name)
		if c.want == core.Failed {
			require.ErrorIs(t, err, lost, c.name)
		} else {
			require.NoError(t, err, c.name)
		}
		store.commitErr = nil
		out, err = txg.Do(ctx, "k", func(context.Context, *fakeTx) error { return nil })
		require.NoError(t, err)
		require.Equal(t, c.again, out, c.name)
	}
}
