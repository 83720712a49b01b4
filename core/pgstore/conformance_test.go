package pgstore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/storetest"
	"github.com/jobonce/jobonce/internal/pgtest"
	"github.com/jobonce/jobonce/internal/testenv"
)

// TestConformance runs the store conformance suite on connections that
// default to each isolation level. Its cases share one schema and table
// (each case uses keys of its own), so the suite does not open a pool per
// case.
func TestConformance(t *testing.T) {
	testenv.Short(t)
	for _, level := range isolationDefaults {
		t.Run(level, func(t *testing.T) {
			pool, schema := pgtest.Postgres(t)
			migratedStore(t, pool, nil)
			s := migratedStore(t, isolationPool(t, schema, level, 16), nil)
			storetest.Run(t, func(*testing.T) driver.Store { return s })
		})
	}
}

// TestConformanceWithoutPreparedStatements runs the suite, and the transactional mode, on pools
// that do not prepare statements (as behind PgBouncer in transaction mode).
func TestConformanceWithoutPreparedStatements(t *testing.T) {
	testenv.Short(t)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) {
			pool, schema := pgtest.Postgres(t)
			migratedStore(t, pool, nil)
			cfg, err := pgxpool.ParseConfig(pgtest.DatabaseURL())
			require.NoError(t, err)
			cfg.ConnConfig.RuntimeParams["search_path"] = schema
			cfg.ConnConfig.DefaultQueryExecMode = mode
			cfg.MaxConns = 16
			unprepared, err := pgxpool.NewWithConfig(context.Background(), cfg)
			require.NoError(t, err)
			t.Cleanup(unprepared.Close)
			s := migratedStore(t, unprepared, nil)

			t.Run("TxGuard", func(t *testing.T) {
				ctx := ctxT(t)
				effects(t, unprepared)
				for _, want := range []core.Outcome{core.Ran, core.Duplicate} {
					out, err := txOf(t, s).Do(ctx, "k", insertEffect("k"))
					require.NoError(t, err)
					require.Equal(t, want, out)
				}
				tx, err := unprepared.Begin(ctx)
				require.NoError(t, err)
				defer tx.Rollback(ctx)
				require.NoError(t, insertEffect("k2")(ctx, tx))
				require.Equal(t, driver.StateClaimed, txOf(t, s).Record(t, ctx, tx, "k2").State)
				out, err := txOf(t, s).Do(ctx, "k2", insertEffect("k2"))
				require.ErrorIs(t, err, core.ErrRunning, "an uncommitted record: %s", out)
				var lt string
				require.NoError(t, tx.QueryRow(ctx, "SHOW lock_timeout").Scan(&lt))
				require.Equal(t, "0", lt)
				require.NoError(t, tx.Commit(ctx))
				require.Equal(t, 2, count(t, unprepared, "SELECT count(*) FROM effects"))
			})
			storetest.Run(t, func(*testing.T) driver.Store { return s })
		})
	}
}
