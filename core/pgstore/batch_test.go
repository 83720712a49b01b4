package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/pgstore"
	"github.com/jobonce/jobonce/internal/pgtest"
	"github.com/jobonce/jobonce/internal/testenv"
)

// loseFirstBatchAnswer runs the first batch with done markers in full and
// then loses its answer, as a connection that broke after the commit would.
type loseFirstBatchAnswer struct {
	*pgstore.Store
	lost      atomic.Bool
	completes atomic.Int32
}

func (l *loseFirstBatchAnswer) Batch(ctx context.Context, completes []driver.CompleteRequest, claims []driver.ClaimRequest) ([]driver.ClaimReply, []error, []error) {
	replies, claimErrs, completeErrs := l.Store.Batch(ctx, completes, claims)
	if len(completes) > 0 && l.lost.CompareAndSwap(false, true) {
		lost := errors.New("unexpected EOF")
		for i := range completeErrs {
			completeErrs[i] = lost
		}
		for i := range claimErrs {
			replies[i], claimErrs[i] = driver.ClaimReply{}, lost
		}
	}
	return replies, claimErrs, completeErrs
}

func (l *loseFirstBatchAnswer) Complete(ctx context.Context, req driver.CompleteRequest) error {
	l.completes.Add(1)
	return l.Store.Complete(ctx, req)
}

// A batch whose done markers committed but whose answer was lost is sent
// again: each marker finds the row its own claim wrote, so the jobs report
// Ran, with no warning, and their redeliveries are Duplicates with the
// stored results.
func TestBatchSentAgainAfterItsAnswerWasLostIsRan(t *testing.T) {
	s, _ := newStore(t, nil)
	store := &loseFirstBatchAnswer{Store: s}
	var warned testenv.Warnings
	g, err := core.New(store, &core.Config{Logger: warned.Logger()})
	require.NoError(t, err)
	ctx := ctxT(t)
	jobs := []core.Job{{Key: testenv.RandomID(8)}, {Key: testenv.RandomID(8)}}
	claims := g.Claim(ctx, jobs...)
	for i, c := range claims {
		require.True(t, c.Runs())
		_, err := c.Work(ctx, func(context.Context) ([]byte, error) { return []byte(jobs[i].Key), nil })
		require.NoError(t, err)
	}
	require.Equal(t, []core.Outcome{core.Ran, core.Ran}, g.Finish(ctx, claims...))
	require.True(t, store.lost.Load(), "the batch's answer was lost")
	require.Positive(t, store.completes.Load(), "the markers were sent again")
	require.Empty(t, warned.Messages())

	for _, job := range jobs {
		res, err := g.Run(ctx, job, func(context.Context) ([]byte, error) { return nil, errors.New("must not run") })
		require.NoError(t, err)
		require.Equal(t, core.Duplicate, res.Outcome)
		require.Equal(t, []byte(job.Key), res.Value)
	}
}

// roundTrips counts the statements a pool sends on their own and the
// batches it sends (a pgx tracer).
type roundTrips struct{ queries, batches atomic.Int64 }

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.queries.Add(1)
	return ctx
}
func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.batches.Add(1)
	return ctx
}
func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// TestBatchWithOneKeyHeldByALongTransactionAnswersTheOthersPromptly sends
// the largest batch the group commit makes (128 requests: 8 done markers and
// 120 claims) with one claim's key held by a transaction that does not
// commit: the held key is answered running, every other request as it would
// be on its own, and the whole batch in one lock wait and two round trips,
// not one round trip per request after the lock wait.
func TestBatchWithOneKeyHeldByALongTransactionAnswersTheOthersPromptly(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	pool, schema := pgtest.Postgres(t)
	migratedStore(t, pool, nil)
	cfg, err := pgxpool.ParseConfig(pgtest.DatabaseURL())
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	var trips roundTrips
	cfg.ConnConfig.Tracer = &trips
	traced, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(traced.Close)
	s := migratedStore(t, traced, nil)
	mode := txOf(t, s)
	holder, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer holder.Rollback(ctx)
	held, err := mode.StoredKey("held")
	require.NoError(t, err)
	mode.Record(t, ctx, holder, "held")

	const markers, claims = 8, 120
	run := func(round string, heldAt int) time.Duration {
		completes := make([]driver.CompleteRequest, markers)
		for i := range completes {
			req := claimReq(fmt.Sprintf("%s-done-%03d", round, i), time.Minute)
			r, err := s.Claim(ctx, req)
			require.NoError(t, err)
			require.Equal(t, driver.StateClaimed, r.State)
			completes[i] = driver.CompleteRequest{Key: req.Key, Token: req.Token, Result: []byte(req.Key), Retention: time.Hour, Fence: r.Fence}
		}
		reqs := make([]driver.ClaimRequest, claims)
		for i := range reqs {
			reqs[i] = claimReq(fmt.Sprintf("%s-free-%03d", round, i), time.Minute)
		}
		if heldAt >= 0 {
			reqs[heldAt] = claimReq(held, time.Minute)
		}
		bctx, cancel := context.WithTimeout(ctx, 5*time.Second) // the Guard's StoreTimeout
		defer cancel()
		queries, batches := trips.queries.Load(), trips.batches.Load()
		start := time.Now()
		replies, claimErrs, completeErrs := s.Batch(bctx, completes, reqs)
		took := time.Since(start)
		require.NoError(t, bctx.Err(), "answered within its context")
		sent := trips.batches.Load() - batches
		require.Zero(t, trips.queries.Load()-queries, "%s: no request was sent on its own", round)
		if heldAt < 0 {
			require.EqualValues(t, 1, sent, "%s: one round trip", round)
		} else {
			require.EqualValues(t, 2, sent, "%s: one round trip more for the held key", round)
		}
		for i, err := range completeErrs {
			require.NoError(t, err, "marker %d", i)
			again, err := s.Claim(ctx, claimReq(completes[i].Key, time.Minute))
			require.NoError(t, err)
			require.Equal(t, driver.StateDone, again.State, "marker %d reported written is durable", i)
			require.Equal(t, []byte(completes[i].Key), again.Result)
		}
		for i, err := range claimErrs {
			require.NoError(t, err, "claim %d", i)
			want := driver.StateClaimed
			if i == heldAt {
				want = driver.StateRunning
			}
			require.Equal(t, want, replies[i].State, "claim %d", i)
			if want == driver.StateClaimed {
				require.NoError(t, s.Extend(ctx, reqs[i].Key, reqs[i].Token, time.Minute), "claim %d is held", i)
			}
		}
		return took
	}
	free := run("free", -1)
	first := run("first", 0)
	middle := run("middle", claims/2)
	last := run("last", claims-1)
	testenv.Report(t, "batch of %d markers and %d claims: %s with no key held; one held by an open transaction (LockTimeout 100ms): %s first, %s in the middle, %s last",
		markers, claims, free.Round(time.Millisecond), first.Round(time.Millisecond), middle.Round(time.Millisecond), last.Round(time.Millisecond))
}

// A mixed Batch in which a claim's statement fails on its lock wait (the
// key is held by a transaction that does not commit) after, or before, a
// done marker's statement in the same implicit transaction: the failure
// rolls the marker back with it, so the marker must be sent again and
// reported from that second write. It must be durable when reported nil,
// and the call must stay within its context.
func TestMixedBatchRewritesAMarkerRolledBackByALockTimeout(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, pool := newStore(t, &pgstore.Config{LockTimeout: 2 * time.Second})
	mode := txOf(t, s)
	holder, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer holder.Rollback(ctx)
	for _, c := range []struct{ marker, held string }{
		{"a-marker", "z-held"}, // the marker's statement runs first, then the claim fails
		{"z-marker", "a-held"}, // the claim fails first: the marker's statement never runs
	} {
		held, err := mode.StoredKey(c.held)
		require.NoError(t, err)
		mode.Record(t, ctx, holder, c.held)

		claim := claimReq(c.marker, time.Minute)
		r, err := s.Claim(ctx, claim)
		require.NoError(t, err)
		require.Equal(t, driver.StateClaimed, r.State)

		bctx, cancel := context.WithTimeout(ctx, time.Second) // well under LockTimeout
		start := time.Now()
		replies, claimErrs, completeErrs := s.Batch(bctx,
			[]driver.CompleteRequest{{Key: c.marker, Token: claim.Token, Result: []byte("r"), Retention: time.Hour}},
			[]driver.ClaimRequest{claimReq(held, time.Minute), claimReq(c.marker+"-free", time.Minute)})
		took := time.Since(start)
		cancel()
		require.Less(t, took, time.Second, "within its context")
		require.NoError(t, completeErrs[0], "%s: the marker was written", c.marker)
		require.NoError(t, claimErrs[0])
		require.Equal(t, driver.StateRunning, replies[0].State, "the held key is running")
		require.NoError(t, claimErrs[1])
		require.Equal(t, driver.StateClaimed, replies[1].State, "the free key is claimed")

		again, err := s.Claim(ctx, claimReq(c.marker, time.Minute))
		require.NoError(t, err)
		require.Equal(t, driver.StateDone, again.State, "%s: the marker reported written is durable", c.marker)
		require.Equal(t, []byte("r"), again.Result)
		t.Logf("%s with %s: answered in %s", c.marker, c.held, took.Round(time.Millisecond))
	}
}
