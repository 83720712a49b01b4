// Package pgtest connects jobonce's tests to the test PostgreSQL, named by
// TEST_DATABASE_URL with a local default: a pool on a schema of the test's
// own, and the server RunExamples probes. It is a module of its own, so that
// pgx enters only the module graphs of the modules whose tests use
// PostgreSQL (core/pgstore, adapters/river, cmd/jobonce and the test
// modules), never the library's.
package pgtest

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobonce/jobonce/internal/testenv"
)

// DatabaseURL returns the test PostgreSQL URL.
func DatabaseURL() string {
	return cmp.Or(os.Getenv("TEST_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
}

// NeedPostgres is the PostgreSQL at DatabaseURL, for testenv.RunExamples.
var NeedPostgres = testenv.NewServer("PostgreSQL", func(ctx context.Context) error {
	return probe(ctx, DatabaseURL())
})

// probe returns why the PostgreSQL at rawURL does not answer, or nil when
// it does.
func probe(ctx context.Context, rawURL string) error {
	conn, err := pgx.Connect(ctx, rawURL)
	if err == nil {
		err = conn.Ping(ctx)
		_ = conn.Close(context.Background())
	}
	if err != nil {
		return fmt.Errorf("PostgreSQL at %s does not answer: %w", rawURL, err)
	}
	return nil
}

// Postgres returns a pool on the test database whose connections use a
// schema of their own (search_path), created now and dropped at cleanup. It
// returns the schema name too.
func Postgres(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	testenv.Short(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin, err := pgxpool.New(ctx, DatabaseURL())
	if err != nil {
		t.Fatalf("TEST_DATABASE_URL: %v", err)
	}
	defer admin.Close()
	if err := admin.Ping(ctx); err != nil {
		t.Fatalf("PostgreSQL at %s does not answer (start it with scripts/test.sh): %v", DatabaseURL(), err)
	}
	schema := "jobonce_test_" + testenv.RandomID(6)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, schemaConfig(t, schema))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin, err := pgxpool.New(ctx, DatabaseURL())
		if err != nil {
			return
		}
		defer admin.Close()
		_, _ = admin.Exec(ctx, fmt.Sprintf("DROP SCHEMA %s CASCADE", schema))
	})
	return pool, schema
}

// PostgresOn returns a pool on the test database whose connections use an
// existing schema (search_path), such as one a parent process made with
// Postgres, closed at cleanup. It opens up to maxConns connections (0 for
// pgx's default) and sets the given parameter name and value pairs on each.
func PostgresOn(t testing.TB, schema string, maxConns int32, params ...string) *pgxpool.Pool {
	t.Helper()
	cfg := schemaConfig(t, schema)
	for i := 0; i+1 < len(params); i += 2 {
		cfg.ConnConfig.RuntimeParams[params[i]] = params[i+1]
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// schemaConfig returns the test database's pool configuration with
// search_path set to schema.
func schemaConfig(t testing.TB, schema string) *pgxpool.Config {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(DatabaseURL())
	if err != nil {
		t.Fatalf("TEST_DATABASE_URL: %v", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	return cfg
}
