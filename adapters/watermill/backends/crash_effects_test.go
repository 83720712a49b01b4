package backends_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// The crash tests count every job's effects in PostgreSQL, one row per
// effect with the worker process that made it, so that duplicates and
// missing jobs are exact. An effect sent with an idempotency key is made
// as an API that accepts one makes it: a key already applied is absorbed
// (the idem column is unique), with no second effect.

const effectsTable = `CREATE TABLE effects (
	job     int NOT NULL,
	worker  int NOT NULL,
	idem    text UNIQUE,
	made_at timestamptz NOT NULL DEFAULT clock_timestamp()
)`

// createEffects creates the effects table in pool's schema.
func createEffects(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(context.Background(), effectsTable)
	require.NoError(t, err)
}

// execer is a pool or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// insertEffect makes job's effect, by worker, in db (a pool, or a job's
// transaction). With a non-empty idem it reports false when the key was
// applied before, and makes no effect.
func insertEffect(ctx context.Context, db execer, job, worker int, idem string) (bool, error) {
	tag, err := db.Exec(ctx, `INSERT INTO effects (job, worker, idem) VALUES ($1, $2, NULLIF($3, ''))
		ON CONFLICT (idem) DO NOTHING`, job, worker, idem)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// effectCounts returns how many effects were made so far, and how many of
// them by worker.
func effectCounts(ctx context.Context, pool *pgxpool.Pool, worker int) (all, by int, err error) {
	err = pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE worker = $1) FROM effects`, worker).Scan(&all, &by)
	return all, by, err
}

// tally is one row's count of the effects.
type tally struct {
	effects    int
	duplicates int // effects beyond a job's first
	missing    int // jobs without an effect
	// gap counts the jobs with two effects, the first by the killed
	// worker: it made the effect and died before its done marker was
	// written, and a survivor ran the job again.
	gap int
	// strayDuplicates are the duplicate effects outside that gap.
	strayDuplicates int
}

// countEffects tallies the effects of jobs 0 to jobs-1; killed is the
// index of the worker that was killed.
func countEffects(t *testing.T, pool *pgxpool.Pool, jobs, killed int) tally {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT job, count(*)::int,
		(count(*) FILTER (WHERE worker = $1))::int, (array_agg(worker ORDER BY made_at))[1]
		FROM effects GROUP BY job`, killed)
	require.NoError(t, err)
	var r tally
	seen := 0
	var job, n, byKilled, first int
	_, err = pgx.ForEachRow(rows, []any{&job, &n, &byKilled, &first}, func() error {
		if job < 0 || job >= jobs {
			return fmt.Errorf("an effect of job %d, beyond the %d jobs published", job, jobs)
		}
		seen++
		r.effects += n
		r.duplicates += n - 1
		if n == 2 && byKilled == 1 && first == killed {
			r.gap++
		} else {
			r.strayDuplicates += n - 1
		}
		return nil
	})
	require.NoError(t, err)
	r.missing = jobs - seen
	return r
}

// crashRow is one line of a crash test's table.
type crashRow struct {
	strategy  string
	published string
	leased    bool // the gap applies
	tally
	absorbed int // repeated idempotency keys the effect refused
	killedAt int // effects made when the worker was killed
	took     time.Duration
}

// summary returns r's figures in a line.
func (r crashRow) summary() string {
	s := fmt.Sprintf("%d effects, %d duplicates, %d missing", r.effects, r.duplicates, r.missing)
	if r.leased {
		s += fmt.Sprintf(", %d in the killed worker's effect-to-marker gap", r.gap)
	}
	if r.absorbed > 0 {
		s += fmt.Sprintf(", %d repeats absorbed by the idempotency key", r.absorbed)
	}
	return s
}

// table formats rows as the experiment's table.
func table(rows []crashRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-42s %7s %10s %7s %4s %8s %6s  %s\n", "strategy", "effects", "duplicates", "missing", "gap", "absorbed", "took", "published")
	for _, r := range rows {
		gap := "-"
		if r.leased {
			gap = strconv.Itoa(r.gap)
		}
		fmt.Fprintf(&b, "%-42s %7d %10d %7d %4s %8d %6s  %s\n", r.strategy, r.effects, r.duplicates, r.missing, gap, r.absorbed,
			r.took.Round(100*time.Millisecond), r.published)
	}
	return b.String()
}
