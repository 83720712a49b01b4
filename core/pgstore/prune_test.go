package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/pgstore"
	"github.com/jobonce/jobonce/internal/pgtest"
	"github.com/jobonce/jobonce/internal/testenv"
)

func TestPruneDeletesOnlyExpiredRows(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, pool := newStore(t, &pgstore.Config{PruneBatch: 7})

	// 50 expired rows (claims and done rows), 5 live claims, 5 live done rows.
	_, err := pool.Exec(ctx, `INSERT INTO jobonce_keys (key, token, expires_at)
		SELECT convert_to('old-' || i, 'UTF8'), CASE WHEN i % 2 = 0 THEN gen_random_uuid() END,
		       clock_timestamp() - interval '1 second'
		  FROM generate_series(1, 50) AS i`)
	require.NoError(t, err)
	live := make([]driver.ClaimRequest, 10)
	for i := range live {
		live[i] = claimReq(fmt.Sprintf("live-%d", i), time.Minute)
		_, err := s.Claim(ctx, live[i])
		require.NoError(t, err)
		if i >= 5 {
			require.NoError(t, s.Complete(ctx, driver.CompleteRequest{Key: live[i].Key, Token: live[i].Token, Retention: time.Hour}))
		}
	}
	// An uncommitted transactional record stays, even once its retention
	// has run out: the pruner cannot see it.
	shortLived := txOf(t, s)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	inFlightKey, err := shortLived.StoredKey("in-flight")
	require.NoError(t, err)
	_, err = s.RecordTx(ctx, tx, driver.RecordRequest{Key: inFlightKey, Retention: time.Millisecond})
	require.NoError(t, err)
	inFlight, err := shortLived.StoredKey("in-flight")
	require.NoError(t, err)
	var expired bool
	require.Eventually(t, func() bool {
		return tx.QueryRow(ctx, "SELECT expires_at <= clock_timestamp() FROM jobonce_keys WHERE key = $1", []byte(inFlight)).Scan(&expired) == nil && expired
	}, 5*time.Second, 5*time.Millisecond)

	n, err := s.Prune(ctx)
	require.NoError(t, err)
	require.Equal(t, 50, n)
	require.Equal(t, 10, records(t, pool))
	for i := range 5 {
		require.NoError(t, s.Extend(ctx, live[i].Key, live[i].Token, time.Minute), "live claims survive")
	}
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, 11, records(t, pool))

	n, err = s.Prune(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "once committed, the expired record goes")
	n, err = s.Prune(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
}

// TestPruneNeverDeletesLiveClaims prunes continuously while workers take
// over the rows it is pruning: claims that expire at once are re-claimed,
// completed with a tiny retention, and claimed again. No holder ever loses
// its claim to the pruner.
func TestPruneNeverDeletesLiveClaims(t *testing.T) {
	t.Parallel()
	testenv.Short(t)
	ctx := ctxT(t)
	small, schema := pgtest.Postgres(t)
	migratedStore(t, small, nil)
	pool := pgtest.PostgresOn(t, schema, 8)
	s := migratedStore(t, pool, &pgstore.Config{PruneBatch: 5})

	const keys, workers = 40, 6
	stop := make(chan struct{})
	var claims, lost, pruned atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("k%02d", (i*7+w)%keys)
				req := claimReq(key, 10*time.Second)
				r, err := s.Claim(ctx, req)
				if err != nil {
					t.Error(err)
					return
				}
				if r.State != driver.StateClaimed {
					continue
				}
				claims.Add(1)
				if err := s.Extend(ctx, key, req.Token, 10*time.Second); err != nil {
					lost.Add(1)
				}
				err = s.Complete(ctx, driver.CompleteRequest{Key: key, Token: req.Token, Retention: time.Millisecond})
				if errors.Is(err, core.ErrLeaseLost) {
					lost.Add(1)
				} else if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			n, err := s.Prune(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			pruned.Add(int64(n))
		}
	})
	require.Eventually(t, func() bool { return claims.Load() > 1000 && pruned.Load() > 200 },
		30*time.Second, 10*time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("claims %d, pruned %d, lost %d", claims.Load(), pruned.Load(), lost.Load())
	require.Zero(t, lost.Load(), "a live claim was deleted")
}

func TestRunPrunerStopsWithContext(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, pool := newStore(t, nil)
	require.ErrorContains(t, s.RunPruner(ctx, 0), "interval must be positive")

	pctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.RunPruner(pctx, 10*time.Millisecond) }()

	for i := range 20 {
		req := claimReq(fmt.Sprintf("k%d", i), time.Minute)
		_, err := s.Claim(ctx, req)
		require.NoError(t, err)
		require.NoError(t, s.Complete(ctx, driver.CompleteRequest{Key: req.Key, Token: req.Token, Retention: time.Millisecond}))
	}
	live := claimReq("live", time.Minute)
	_, err := s.Claim(ctx, live)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return records(t, pool) == 1 }, 10*time.Second, 10*time.Millisecond)
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("RunPruner did not return after its context was cancelled")
	}
	require.NoError(t, s.Extend(ctx, "live", live.Token, time.Minute))
}

// TestPruneRarelyMakesAClaimOfAnExpiredKeyWaitPastItsLockTimeout claims
// expired keys while Prune deletes them: a claim that meets a row Prune has
// locked waits for Prune's statement, which Prune keeps under a quarter of
// LockTimeout, so a free key is answered Running only when a statement ran
// four times as long as planned (a PostgreSQL backend held off its CPU on a
// loaded machine): at most one claim in a hundred. PruneBatch is large, as
// a table with a backlog of expired rows would be pruned; a Prune that held
// its locks for the whole backlog would answer most of them Running.
func TestPruneRarelyMakesAClaimOfAnExpiredKeyWaitPastItsLockTimeout(t *testing.T) {
	t.Parallel()
	testenv.Short(t)
	ctx := ctxT(t)
	small, schema := pgtest.Postgres(t)
	migratedStore(t, small, nil)
	pool := pgtest.PostgresOn(t, schema, 8)
	s := migratedStore(t, pool, &pgstore.Config{PruneBatch: 50000, LockTimeout: 250 * time.Millisecond})

	const rows, workers = 150000, 6
	_, err := pool.Exec(ctx, `INSERT INTO jobonce_keys (key, token, expires_at)
		SELECT convert_to('free-' || i, 'UTF8'), CASE WHEN i % 2 = 0 THEN gen_random_uuid() END,
		       clock_timestamp() - interval '1 second'
		  FROM generate_series(0, $1::int - 1) AS i`, rows)
	require.NoError(t, err)

	var claimed, running, during atomic.Int64
	var pruning atomic.Bool
	pruning.Store(true)
	pruned := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < rows; i += workers {
				select {
				case <-pruned:
					return
				default:
				}
				r, err := s.Claim(ctx, claimReq(fmt.Sprintf("free-%d", (i*7919)%rows), time.Minute))
				if err != nil {
					t.Error(err)
					return
				}
				if pruning.Load() {
					during.Add(1)
				}
				switch r.State {
				case driver.StateClaimed:
					claimed.Add(1)
				default:
					running.Add(1)
					t.Logf("free key answered %v, retry after %s", r.State, r.Remaining)
				}
			}
		})
	}
	start := time.Now()
	n, err := s.Prune(ctx)
	took := time.Since(start)
	pruning.Store(false)
	close(pruned)
	wg.Wait()
	require.NoError(t, err)
	testenv.Report(t, "pruned %d rows in %s; %d claims of free keys meanwhile: %d claimed, %d running",
		n, took.Round(time.Millisecond), during.Load(), claimed.Load(), running.Load())
	require.Positive(t, n)
	require.Greater(t, during.Load(), int64(50), "claims ran while Prune deleted")
	require.LessOrEqual(t, running.Load(), during.Load()/100, "free keys answered running")
}
