package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/pgstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// newStore returns a migrated Store in a schema of its own, with its pool.
func newStore(t testing.TB, cfg *pgstore.Config) (*pgstore.Store, *pgxpool.Pool) {
	t.Helper()
	pool, _ := testenv.Postgres(t)
	return migratedStore(t, pool, cfg), pool
}

func migratedStore(t testing.TB, pool *pgxpool.Pool, cfg *pgstore.Config) *pgstore.Store {
	t.Helper()
	var c pgstore.Config
	if cfg != nil {
		c = *cfg
	}
	c.Migrate = true
	s, err := pgstore.New(context.Background(), pool, &c)
	require.NoError(t, err)
	return s
}

func claimReq(key string, lease time.Duration) core.ClaimRequest {
	return core.ClaimRequest{Key: key, Token: core.NewToken(), Lease: lease}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// count runs a count(*) style query and returns its integer.
func count(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}
