package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/pgstore"
	"github.com/jobonce/jobonce/internal/pgtest"
)

// tableBeforeFences is the table and index as Migrate created them before
// the fence column existed.
const tableBeforeFences = `
CREATE TABLE jobonce_keys (
    key         bytea       NOT NULL PRIMARY KEY,
    token       uuid,
    fingerprint bytea       NOT NULL DEFAULT '',
    result      bytea,
    expires_at  timestamptz NOT NULL
);
CREATE INDEX jobonce_keys_expires_at_idx ON jobonce_keys (expires_at)`

// TestMigrateAddsFenceColumn: on a table an earlier version created, New
// without Migrate names the missing column and says to migrate; Migrate adds
// it, keeps the rows, and runs again without change. Rows written before
// have no fence and still work: a done row is done, an expired claim is
// taken over with a fence.
func TestMigrateAddsFenceColumn(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	pool, _ := pgtest.Postgres(t)
	_, err := pool.Exec(ctx, tableBeforeFences)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO jobonce_keys (key, token, fingerprint, result, expires_at) VALUES
		('done', NULL, 'fp', 'r', now() + interval '1 hour'),
		('lapsed', gen_random_uuid(), '', NULL, now() - interval '1 second')`)
	require.NoError(t, err)

	s := requireMigrateFixes(t, ctx, pool, `column "fence" does not exist`)
	require.Equal(t, 2, count(t, pool, "SELECT count(*) FROM jobonce_keys WHERE fence IS NULL"), "the rows are kept")

	r, err := s.Claim(ctx, claimReq("done", time.Minute))
	require.NoError(t, err)
	require.Equal(t, driver.StateDone, r.State)
	require.Equal(t, []byte("r"), r.Result)
	require.Positive(t, fenceOf(t, ctx, s, claimReq("lapsed", time.Minute)))

	// A Store made with Config.Migrate migrates an old table too.
	pool2, _ := pgtest.Postgres(t)
	_, err = pool2.Exec(ctx, tableBeforeFences)
	require.NoError(t, err)
	migratedStore(t, pool2, nil)
	require.Equal(t, 1, count(t, pool2, "SELECT count(*) FROM information_schema.columns WHERE table_name = 'jobonce_keys' AND column_name = 'fence' AND table_schema = current_schema()"))
}

// aheadOfClock sets the fence of key's row an hour ahead of the database
// clock, as if the clock had stepped back since the row's claim, and
// returns that fence. With expire, the row expires as well.
func aheadOfClock(t *testing.T, ctx context.Context, pool *pgxpool.Pool, key string, expire bool) int64 {
	t.Helper()
	var fence int64
	require.NoError(t, pool.QueryRow(ctx, `UPDATE jobonce_keys
		SET fence = floor(extract(epoch FROM clock_timestamp() + interval '1 hour') * 1000000)::bigint,
		    expires_at = CASE WHEN $2 THEN clock_timestamp() - interval '1 second' ELSE expires_at END
		WHERE key = $1 RETURNING fence`, []byte(key), expire).Scan(&fence))
	return fence
}

// TestFenceFollowsTheExpiredRow: a claim or a transactional record that
// takes over an expired or released row gets a fence one more than the
// row's when the row's fence is ahead of the database clock.
func TestFenceFollowsTheExpiredRow(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, pool := newStore(t, nil)
	held := claimReq("k", time.Minute)
	fenceOf(t, ctx, s, held)

	ahead := aheadOfClock(t, ctx, pool, "k", false)
	require.NoError(t, s.Release(ctx, "k", held.Token))
	require.Equal(t, ahead+1, fenceOf(t, ctx, s, claimReq("k", time.Minute)), "a claim after a release")

	ahead = aheadOfClock(t, ctx, pool, "k", true)
	require.Equal(t, ahead+1, fenceOf(t, ctx, s, claimReq("k", time.Minute)), "a claim after a lapsed lease")

	ahead = aheadOfClock(t, ctx, pool, "k", true)
	r := recordTx(t, ctx, s, "k")
	require.Equal(t, driver.StateClaimed, r.State)
	require.Equal(t, ahead+1, r.Fence, "a transactional record")
}

// TestRecordTxFence: a transactional record that takes a key over from a
// lapsed leased claim gets a greater fence than that claim; a copy that
// finds the record done gets its remaining retention.
func TestRecordTxFence(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, _ := newStore(t, nil)
	lapsed := fenceOf(t, ctx, s, claimReq("k", 20*time.Millisecond))
	var r driver.ClaimReply
	deadline := time.Now().Add(5 * time.Second)
	for r = recordTx(t, ctx, s, "k"); r.State != driver.StateClaimed; r = recordTx(t, ctx, s, "k") {
		require.Equal(t, driver.StateRunning, r.State)
		require.True(t, time.Now().Before(deadline), "the lapsed claim's row is taken over")
		time.Sleep(5 * time.Millisecond)
	}
	require.Greater(t, r.Fence, lapsed)

	r = recordTx(t, ctx, s, "k")
	require.Equal(t, driver.StateDone, r.State)
	require.Greater(t, r.Remaining, 50*time.Minute)
	require.LessOrEqual(t, r.Remaining, time.Hour)
}

// fenceOf claims req on s and returns the claim's fence.
func fenceOf(t *testing.T, ctx context.Context, s *pgstore.Store, req driver.ClaimRequest) int64 {
	t.Helper()
	r, err := s.Claim(ctx, req)
	require.NoError(t, err)
	require.Equal(t, driver.StateClaimed, r.State)
	return r.Fence
}

// recordTx records key in a transaction of its own, kept for an hour, and
// commits it when it was recorded.
func recordTx(t *testing.T, ctx context.Context, s *pgstore.Store, key string) driver.ClaimReply {
	t.Helper()
	tx, err := s.BeginTx(ctx)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.RollbackTx(ctx, tx)) }()
	r, err := s.RecordTx(ctx, tx, driver.RecordRequest{Key: key, Retention: time.Hour})
	require.NoError(t, err)
	if r.State == driver.StateClaimed {
		require.NoError(t, s.CommitTx(ctx, tx))
	}
	return r
}
