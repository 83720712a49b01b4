package pgstore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/pgstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// TestFailOpenDoesNotRunWhenPostgreSQLAnswersAnError: a statement the
// server answers with an error (here its table was dropped under the store)
// is an answer, no outage: FailOpen runs no copy, and the error is the
// server's, wrapped with the store's advice.
func TestFailOpenDoesNotRunWhenPostgreSQLAnswersAnError(t *testing.T) {
	ctx := ctxT(t)
	s, pool := newStore(t, nil)
	_, err := pool.Exec(ctx, "DROP TABLE jobonce_keys")
	require.NoError(t, err)
	var seen testenv.Outcomes
	g := testenv.NewGuard(t, s, &core.Config{FailOpen: true, Observer: seen.Observe})

	ran := false
	out, err := g.Do(ctx, "answered", func(context.Context) error { ran = true; return nil })
	require.Equal(t, core.Unavailable, out)
	require.False(t, ran)
	require.ErrorIs(t, err, core.ErrStoreUnavailable)
	require.ErrorIs(t, err, pgstore.ErrNotMigrated)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, "the server's answer")
	require.Equal(t, "42P01", pgErr.Code)
	require.Zero(t, seen.Get(core.Unguarded))
}
