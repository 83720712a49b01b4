package pgstore_test

import (
	"context"
	"os"
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

// newStore returns a migrated Store in a schema of its own, with its pool.
func newStore(t testing.TB, cfg *pgstore.Config) (*pgstore.Store, *pgxpool.Pool) {
	t.Helper()
	pool, _ := pgtest.Postgres(t)
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

// requireMigrateFixes checks that New on pool refuses its table with an
// error matching ErrNotMigrated that names the table, says to migrate and
// holds each of want; and that Migrate, run twice, makes New succeed.
func requireMigrateFixes(t testing.TB, ctx context.Context, pool *pgxpool.Pool, want ...string) *pgstore.Store {
	t.Helper()
	_, err := pgstore.New(ctx, pool, nil)
	require.ErrorIs(t, err, pgstore.ErrNotMigrated)
	for _, w := range append([]string{"run pgstore.Migrate", `"jobonce_keys"`}, want...) {
		require.ErrorContains(t, err, w)
	}
	require.NoError(t, pgstore.Migrate(ctx, pool, nil))
	require.NoError(t, pgstore.Migrate(ctx, pool, nil), "Migrate is idempotent")
	s, err := pgstore.New(ctx, pool, nil)
	require.NoError(t, err)
	return s
}

func claimReq(key string, lease time.Duration) driver.ClaimRequest {
	return driver.ClaimRequest{Key: key, Token: driver.NewToken(), Lease: lease}
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

// txMode is the transactional mode of a Guard on a Store, under the names
// the tests use.
type txMode struct {
	s  *pgstore.Store
	g  *core.Guard
	tg *core.TxGuard[pgx.Tx]
}

// txOf returns the transactional mode of a Guard with the default
// configuration on s.
func txOf(t testing.TB, s *pgstore.Store) txMode { return txWith(t, s, nil) }

// txWith returns the transactional mode of a Guard configured by cfg on s.
func txWith(t testing.TB, s *pgstore.Store, cfg *core.Config) txMode {
	t.Helper()
	g, err := core.New(s, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })
	tg, err := core.NewTxGuard[pgx.Tx](g)
	require.NoError(t, err)
	return txMode{s: s, g: g, tg: tg}
}

func (m txMode) Do(ctx context.Context, key string, fn func(context.Context, pgx.Tx) error) (core.Outcome, error) {
	return m.tg.Do(ctx, key, fn)
}

func (m txMode) Run(ctx context.Context, job core.Job, fn func(context.Context, pgx.Tx) error) (core.Outcome, error) {
	return m.tg.Run(ctx, job, fn)
}

// Record records key as done in tx at the store's level (RecordTx), as a
// transaction of another worker that has not committed yet holds it.
func (m txMode) Record(t testing.TB, ctx context.Context, tx pgx.Tx, key string) driver.ClaimReply {
	t.Helper()
	stored, err := m.g.StoredKey(key)
	require.NoError(t, err)
	reply, err := m.s.RecordTx(ctx, tx, driver.RecordRequest{Key: stored, Retention: time.Hour})
	require.NoError(t, err)
	return reply
}

func (m txMode) StoredKey(key string) (string, error) { return m.g.StoredKey(key) }

func TestMain(m *testing.M) { os.Exit(testenv.RunExamples(m, pgtest.NeedPostgres)) }

// isolationDefaults are the values of default_transaction_isolation the
// store is tested under: whatever a role's default, it behaves the same.
var isolationDefaults = []string{"read committed", "repeatable read", "serializable"}

// isolationPool returns a pool on schema whose connections default to
// transactions at level (set for its sessions only), with up to maxConns
// connections.
func isolationPool(t testing.TB, schema, level string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.PostgresOn(t, schema, maxConns, "default_transaction_isolation", level)
	var got string
	require.NoError(t, pool.QueryRow(context.Background(), "SHOW default_transaction_isolation").Scan(&got))
	require.Equal(t, level, got)
	return pool
}
