package pgstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/pgstore"
	"github.com/jobonce/jobonce/internal/pgtest"
	"github.com/jobonce/jobonce/internal/testenv"
)

// A Guard on a database that answers is ready; one whose database cannot be
// reached, or whose table was dropped, answers ErrStoreUnavailable with the
// cause, and is ready again once the database is back.
func TestReadyFollowsTheDatabase(t *testing.T) {
	t.Parallel()
	direct, schema := pgtest.Postgres(t)
	migratedStore(t, direct, nil)
	flaky := testenv.StartFlaky(t, "127.0.0.1:5432")
	cfg, err := pgxpool.ParseConfig("postgres://postgres@" + flaky.Addr() + "/test?sslmode=disable")
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	viaProxy, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(viaProxy.Close)
	s, err := pgstore.New(ctxT(t), viaProxy, nil)
	require.NoError(t, err)
	g, err := core.New(s, &core.Config{Logger: testenv.Quiet, StoreTimeout: time.Second})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, s.Ready(ctx))
	require.NoError(t, g.Ready(ctx))

	flaky.Cut()
	err = g.Ready(ctx)
	require.ErrorIs(t, err, core.ErrStoreUnavailable)
	require.NotErrorIs(t, err, core.ErrStoreRisk)
	flaky.Restore()
	require.NoError(t, g.Ready(ctx))

	_, err = direct.Exec(ctx, "DROP TABLE jobonce_keys")
	require.NoError(t, err)
	err = g.Ready(ctx)
	require.ErrorIs(t, err, core.ErrStoreUnavailable)
	require.ErrorIs(t, err, pgstore.ErrNotMigrated)
}

// A database that does not answer makes Ready answer ErrStoreUnavailable
// within the Guard's StoreTimeout.
func TestReadyAnswersWithinStoreTimeout(t *testing.T) {
	t.Parallel()
	direct, schema := pgtest.Postgres(t)
	migratedStore(t, direct, nil)
	pool, proxy := proxied(t, schema)
	s, err := pgstore.New(ctxT(t), pool, nil)
	require.NoError(t, err)
	g, err := core.New(s, &core.Config{Logger: testenv.Quiet, StoreTimeout: 300 * time.Millisecond})
	require.NoError(t, err)
	pool.Reset()                             // a new connection sends the statement's text
	proxy.LoseRequestOnce([]byte("LIMIT 0")) // the statement Ready sends
	start := time.Now()
	err = g.Ready(context.Background())
	require.Less(t, time.Since(start), 5*time.Second, "bounded by StoreTimeout")
	require.True(t, proxy.Silenced(), "the statement was lost")
	require.ErrorIs(t, err, core.ErrStoreUnavailable)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// A role that may read the table but not write it, and a session that is
// read-only, answer Ready's statement but refuse every claim: the Guard is
// not ready, and says why.
func TestReadyRefusesADatabaseThatRefusesEveryClaim(t *testing.T) {
	t.Parallel()
	direct, schema := pgtest.Postgres(t)
	migratedStore(t, direct, nil)
	ctx := context.Background()
	role := "reader_" + strings.ToLower(schema)
	for _, sql := range []string{
		`CREATE ROLE ` + role + ` LOGIN`,
		`GRANT USAGE ON SCHEMA ` + schema + ` TO ` + role,
		`GRANT SELECT ON ALL TABLES IN SCHEMA ` + schema + ` TO ` + role,
	} {
		_, err := direct.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	t.Cleanup(func() {
		_, _ = direct.Exec(context.Background(), `DROP OWNED BY `+role)
		_, _ = direct.Exec(context.Background(), `DROP ROLE `+role)
	})
	for name, params := range map[string]string{
		"a role that may only read": "user=" + role,
		"a read-only session":       "user=postgres default_transaction_read_only=on",
	} {
		cfg, err := pgxpool.ParseConfig("host=127.0.0.1 port=5432 dbname=test sslmode=disable " + params)
		require.NoError(t, err)
		cfg.ConnConfig.RuntimeParams["search_path"] = schema
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		s, err := pgstore.New(ctxT(t), pool, nil)
		require.NoError(t, err, name)
		g, err := core.New(s, &core.Config{Logger: testenv.Quiet, StoreTimeout: 2 * time.Second})
		require.NoError(t, err)
		out, err := g.Do(ctx, "job", func(context.Context) error { return nil })
		require.Equal(t, core.Unavailable, out, "%s: every claim fails", name)
		require.ErrorIs(t, err, core.ErrStoreUnavailable, name)
		err = g.Ready(ctx)
		require.ErrorIs(t, err, core.ErrStoreUnavailable, "%s: Ready", name)
	}
}
