package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/internal/testenv"
)

// probeTimeout bounds each probe here, as RunExamples bounds its own.
const probeTimeout = 2 * time.Second

func probeWithin(rawURL string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	start := time.Now()
	err := probe(ctx, rawURL)
	return time.Since(start), err
}

func TestProbeReportsAClosedPort(t *testing.T) {
	addr := testenv.ClosedAddr(t)
	_, err := probeWithin("postgres://postgres@" + addr + "/test?sslmode=disable")
	require.ErrorContains(t, err, "PostgreSQL at postgres://postgres@"+addr)
}

func TestProbeBoundsAServerThatNeverAnswers(t *testing.T) {
	addr := testenv.SilentAddr(t)
	took, err := probeWithin("postgres://postgres@" + addr + "/test?sslmode=disable")
	require.ErrorContains(t, err, "PostgreSQL at postgres://postgres@"+addr)
	require.Less(t, took, probeTimeout+time.Second)
}

func TestProbeFindsTheTestServer(t *testing.T) {
	testenv.Short(t)
	_, err := probeWithin(DatabaseURL())
	require.NoError(t, err)
}

func TestPostgresGivesEachTestASchemaOfItsOwn(t *testing.T) {
	pool, schema := Postgres(t)
	var current string
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT current_schema()").Scan(&current))
	require.Equal(t, schema, current)
	other := PostgresOn(t, schema, 1, "application_name", "jobonce-pgtest")
	var app string
	require.NoError(t, other.QueryRow(context.Background(),
		"SELECT current_schema() || ' ' || current_setting('application_name')").Scan(&app))
	require.Equal(t, schema+" jobonce-pgtest", app)
}
