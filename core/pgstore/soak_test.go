package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/internal/pgtest"
	"github.com/jobonce/jobonce/internal/testenv"
)

// TestSignalSoak runs, for JOBONCE_SOAK (skipped when unset), jobs whose
// copies wait for them on four Guards sharing a store, while every 15s the
// Listeners' backends are terminated (pg_terminate_backend), or every
// backend of the store's pool. The signal comes back after each, and
// neither goroutines nor connections grow.
func TestSignalSoak(t *testing.T) {
	d := testenv.SoakDuration(t)
	_, schema := pgtest.Postgres(t)
	app := "jobonce-soak-" + testenv.RandomID(4)
	pool := pgtest.PostgresOn(t, schema, 16, "application_name", app)
	s := migratedStore(t, pool, nil)
	admin, err := pgxpool.New(context.Background(), pgtest.DatabaseURL())
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	terminate := func(listeners bool) func() {
		return func() {
			_, _ = admin.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE application_name = $1 AND ($2 = false OR query LIKE 'LISTEN %')`, app, listeners)
		}
	}
	testenv.RunSignalSoak(t, d, testenv.SignalSoak{
		Store: s, Prefix: testenv.Prefix(t), Guards: 4, Jobs: 8, FaultEvery: 15 * time.Second,
		Faults: []testenv.Fault{
			{Name: "the Listeners' backends terminated", Apply: terminate(true)},
			{Name: "every backend of the pool terminated", Apply: terminate(false)},
		},
		Conns: func(ctx context.Context) (all, listeners int, err error) {
			err = admin.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE query LIKE 'LISTEN %')
				FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&all, &listeners)
			return all, listeners, err
		},
	})
}
