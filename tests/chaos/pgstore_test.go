package chaos_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core/pgstore"
	"github.com/jobonce/jobonce/internal/pgtest"
	"github.com/jobonce/jobonce/internal/testenv"
	"github.com/jobonce/jobonce/tests/chaos"
)

// isolationDefaults are the default_transaction_isolation settings the
// store must work under.
var isolationDefaults = []string{"read committed", "repeatable read", "serializable"}

// TestPgstore runs the harness through a proxy that the test cuts now and
// then, on top of the faults the harness injects, among
// them the server's own error answers (out_of_memory), on connections that
// default to each isolation level, while other processes start with
// Migrate.
func TestPgstore(t *testing.T) {
	testenv.Short(t)
	for _, level := range isolationDefaults {
		t.Run(level, func(t *testing.T) { pgChaos(t, level, 400*time.Millisecond) })
	}
}

// pgChaos runs the harness for d on connections whose
// default_transaction_isolation is level.
func pgChaos(t *testing.T, level string, d time.Duration) {
	direct, schema := pgtest.Postgres(t)
	cfg, err := pgxpool.ParseConfig(pgtest.DatabaseURL())
	require.NoError(t, err)
	target := net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
	flaky := testenv.StartFlaky(t, target)
	addr := flaky.Addr()
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	n, err := strconv.ParseUint(port, 10, 16)
	require.NoError(t, err)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(n)
	cfg.ConnConfig.Fallbacks = nil
	cfg.ConnConfig.ConnectTimeout = 500 * time.Millisecond
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = level
	cfg.MaxConns = 16
	viaProxy, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(viaProxy.Close)

	// Another process starts with Migrate while the run goes on, again and
	// again, as the workers of a rolling deploy do: on an up-to-date table
	// it must hold up no claim.
	stop := make(chan struct{})
	migrated := make(chan int)
	go func() {
		n := 0
		defer func() { migrated <- n }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := pgstore.New(ctx, direct, &pgstore.Config{Migrate: true})
			cancel()
			if err != nil {
				t.Errorf("a migration started mid-run: %v", err)
				return
			}
			n++
		}
	}()
	chaos.Run(t, chaos.Options{
		Store:    pgStore(t, viaProxy),
		Verify:   pgStore(t, direct),
		Duration: d,
		Cut:      flaky.Cut,
		Restore:  flaky.Restore,
		Refusal: func() error {
			return &pgconn.PgError{Severity: "ERROR", Code: "53200", Message: "out of memory"}
		},
	})
	close(stop)
	require.Positive(t, <-migrated, "no migration started during the run")
	viaProxy.Close()
}

// pgStore returns a Store on pool, migrating its table.
func pgStore(t testing.TB, pool *pgxpool.Pool) *pgstore.Store {
	t.Helper()
	s, err := pgstore.New(context.Background(), pool, &pgstore.Config{Migrate: true})
	require.NoError(t, err)
	return s
}
