package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/pgstore"
	"github.com/jobonce/jobonce/internal/pgtest"
	"github.com/jobonce/jobonce/internal/testenv"
)

// Environment of a crash worker process.
const (
	envCrashSchema = "JOBONCE_PGSTORE_CRASH_SCHEMA" // the schema to work in
	envCrashJobs   = "JOBONCE_PGSTORE_CRASH_JOBS"
	envCrashHold   = "JOBONCE_PGSTORE_CRASH_HOLD" // from this job on, hold each transaction open until killed
)

// TestCrashWorker is the worker process of TestCrashMidTransaction. It does
// nothing unless started by it: it runs every job through TxGuard.Do, each
// effect holding its transaction open for a few milliseconds, and prints
// "tx <key>" inside each transaction and "done <key>" after it.
func TestCrashWorker(t *testing.T) {
	if !testenv.IsWorker(t) {
		return
	}
	schema := os.Getenv(envCrashSchema)
	jobs, err := strconv.Atoi(os.Getenv(envCrashJobs))
	require.NoError(t, err)
	ctx := context.Background()
	s, err := pgstore.New(ctx, pgtest.PostgresOn(t, schema, 2), &pgstore.Config{LockTimeout: 20 * time.Millisecond})
	require.NoError(t, err)
	hold := jobs
	if v := os.Getenv(envCrashHold); v != "" {
		hold, err = strconv.Atoi(v)
		require.NoError(t, err)
	}
	mode := txOf(t, s)
	for j := range jobs {
		key := fmt.Sprintf("job-%03d", j)
		pause := "0.005"
		if j >= hold {
			pause = "60" // the test kills this process meanwhile
		}
		for {
			out, err := mode.Do(ctx, key, func(ctx context.Context, tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, "INSERT INTO effects (key) VALUES ($1)", key); err != nil {
					return err
				}
				fmt.Printf("tx %s\n", key)
				_, err := tx.Exec(ctx, "SELECT pg_sleep("+pause+")")
				return err
			})
			if errors.Is(err, core.ErrRunning) {
				time.Sleep(10 * time.Millisecond) // a queue's retry delay
				continue
			}
			require.NoError(t, err)
			fmt.Printf("done %s %s\n", key, out)
			break
		}
	}
}

// TestCrashMidTransaction kills a worker process (SIGKILL) in the middle of
// a job's transaction, then lets a second worker run every job: each job's
// effect exists exactly once, none is missing.
func TestCrashMidTransaction(t *testing.T) {
	t.Parallel()
	testenv.Short(t)
	pool, schema := pgtest.Postgres(t)
	migratedStore(t, pool, nil)
	effects(t, pool)
	const jobs = 200

	worker := func(env ...string) *testenv.Worker {
		return testenv.StartWorker(t, "TestCrashWorker", append(env, envCrashSchema+"="+schema, envCrashJobs+"="+strconv.Itoa(jobs))...)
	}

	first := worker(envCrashHold + "=60")
	done := 0
	line, err := first.WaitFor(2*time.Minute, func(line string) bool {
		if strings.HasPrefix(line, "done ") {
			done++
		}
		return done >= 60 && strings.HasPrefix(line, "tx ")
	})
	require.NoError(t, err, "the worker finished before it could be killed")
	require.NoError(t, first.Kill())
	killedIn := strings.TrimPrefix(line, "tx ")
	t.Logf("killed the first worker inside the transaction of %s after %d jobs", killedIn, done)

	second := worker()
	require.NoError(t, second.Wait(2*time.Minute), "%s", second.Output())

	require.Equal(t, jobs, count(t, pool, "SELECT count(*) FROM effects"), "no duplicate effect")
	require.Equal(t, jobs, count(t, pool, "SELECT count(DISTINCT key) FROM effects"), "no missing effect")
	require.Equal(t, jobs, records(t, pool))
	require.Contains(t, second.Output(), "done "+killedIn+" ran", "the killed job ran in the second worker")
}
