package riveronce

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/pgstore"
	"github.com/jobonce/jobonce/internal/pgtest"
	"github.com/jobonce/jobonce/internal/testenv"
)

// The crash tests run a River worker in a child process (this test binary,
// re-executed by testenv.StartWorker), kill it with SIGKILL mid-run, and let
// a client in the test process rescue and finish the jobs.
const (
	crashEnv       = "RIVERONCE_CRASH_WORKER" // "guard" or "tx"
	crashSchemaEnv = "RIVERONCE_CRASH_SCHEMA"
	crashPrefixEnv = "RIVERONCE_CRASH_PREFIX"
	crashRunEnv    = "RIVERONCE_CRASH_RUN" // jobs the child finishes before it starts blocking
)

const crashLease = time.Second

type crashArgs struct {
	N int `json:"n"`
}

func (crashArgs) Kind() string { return "riveronce_crash" }

func (a crashArgs) key() string { return fmt.Sprintf("crash-%d", a.N) }

// crashWorker writes its effect with the pool (guard mode).
type crashWorker struct {
	river.WorkerDefaults[crashArgs]
	pool *pgxpool.Pool
	// block, when set, is called first and may block forever.
	block func(job *river.Job[crashArgs])
}

func (w *crashWorker) Work(ctx context.Context, job *river.Job[crashArgs]) error {
	if w.block != nil {
		w.block(job)
	}
	return insertEffect(ctx, w.pool, job.Args.key(), job.ID)
}

// crashTxWorker writes its effect in the job's transaction (tx mode).
type crashTxWorker struct {
	river.WorkerDefaults[crashArgs]
	// afterEffect, when set, is called after the effect and may block forever.
	afterEffect func(job *river.Job[crashArgs])
}

func (w *crashTxWorker) WorkTx(ctx context.Context, tx pgx.Tx, job *river.Job[crashArgs]) error {
	if _, err := tx.Exec(ctx, `INSERT INTO effects (key, job_id) VALUES ($1, $2)`, job.Args.key(), job.ID); err != nil {
		return err
	}
	if w.afterEffect != nil {
		w.afterEffect(job)
	}
	return nil
}

// reportDone prints "done <key>" when the inner worker returns nil.
type reportDone struct {
	river.Worker[crashArgs]
}

func (w reportDone) Work(ctx context.Context, job *river.Job[crashArgs]) error {
	err := w.Worker.Work(ctx, job)
	if err == nil {
		fmt.Println("done", job.Args.key())
	}
	return err
}

// TestCrashWorker is the child process of the crash tests; it does nothing
// unless started by one.
func TestCrashWorker(t *testing.T) {
	if !testenv.IsWorker(t) {
		return
	}
	mode := os.Getenv(crashEnv)
	ctx := context.Background()
	schema := os.Getenv(crashSchemaEnv)
	pool := pgtest.PostgresOn(t, schema, 0)
	run, err := strconv.Atoi(os.Getenv(crashRunEnv))
	require.NoError(t, err)

	// Jobs after the first run ones block forever, at a point that depends on
	// the mode, and say so.
	var started atomic.Int64
	never := make(chan struct{})
	blockAfter := func(point string) func(job *river.Job[crashArgs]) {
		return func(job *river.Job[crashArgs]) {
			if started.Add(1) > int64(run) {
				fmt.Println(point, job.Args.key())
				<-never
			}
		}
	}

	workers := river.NewWorkers()
	switch mode {
	case "guard":
		g := testenv.RedisGuardOn(t, testenv.Redis(t, ""), os.Getenv(crashPrefixEnv), &core.Config{
			Lease: crashLease,
			Observer: func(_ context.Context, e core.Event) {
				if e.Outcome == core.Ran {
					fmt.Println("ran", e.Key)
				}
			},
		})
		river.AddWorker(workers, MustWrap[crashArgs](g, &crashWorker{pool: pool, block: blockAfter("blocked-before-effect")}, nil))
	case "tx":
		store, err := pgstore.New(ctx, pool, nil)
		require.NoError(t, err)
		// Of the jobs after the first run ones, odd ones block between the
		// effect and the job's completion, even ones between the completion
		// and the commit.
		var atCommit sync.Map // job ID -> true
		w := &crashTxWorker{afterEffect: func(job *river.Job[crashArgs]) {
			n := started.Add(1)
			switch {
			case n <= int64(run):
			case n%2 == 1:
				fmt.Println("blocked-after-effect", job.Args.key())
				<-never
			default:
				atCommit.Store(job.ID, true)
			}
		}}
		commitHook = func(_ context.Context, job *rivertype.JobRow) {
			if _, ok := atCommit.Load(job.ID); ok {
				fmt.Println("blocked-before-commit", job.ID)
				<-never
			}
		}
		river.AddWorker(workers, river.Worker[crashArgs](reportDone{MustWrapTx[crashArgs](txGuard(t, store), w, nil)}))
	default:
		t.Fatalf("unknown %s %q", crashEnv, mode)
	}
	rcfg := clientConfig(schema, workers, 8)
	rcfg.LeaderElectionDisabled = true // a killed leader would hold leadership for its TTL
	rcfg.JobTimeout = -1
	startClient(t, pool, rcfg)
	fmt.Println("started")
	time.Sleep(2 * time.Minute) // the parent kills this process long before
	t.Fatal("the crash worker was not killed")
}

// crashChild starts the child worker.
func crashChild(t *testing.T, mode, schema, prefix string, run int) *testenv.Worker {
	t.Helper()
	return testenv.StartWorker(t, "TestCrashWorker", crashEnv+"="+mode, crashSchemaEnv+"="+schema,
		crashPrefixEnv+"="+prefix, crashRunEnv+"="+strconv.Itoa(run))
}

// killWhen reads the child's lines until ready says so, then kills it with
// SIGKILL and waits for it to exit. It returns how many lines started with
// each word.
func killWhen(t *testing.T, w *testenv.Worker, ready func(seen map[string]int) bool) map[string]int {
	t.Helper()
	seen := map[string]int{}
	_, err := w.WaitFor(90*time.Second, func(line string) bool {
		word, _, _ := strings.Cut(line, " ")
		seen[word]++
		return ready(seen)
	})
	require.NoError(t, err, "the crash worker did not get ready; seen %v", seen)
	require.NoError(t, w.Kill())
	return seen
}

// rescueConfig is the surviving client: it leads, so its rescuer runs at
// start and puts the dead worker's running jobs back in the queue.
func rescueConfig(schema string, workers *river.Workers) *river.Config {
	cfg := clientConfig(schema, workers, 8)
	cfg.JobTimeout = 500 * time.Millisecond
	cfg.RescueStuckJobsAfter = 500 * time.Millisecond
	return cfg
}

// TestCrashGuard: a worker holding claims is killed mid-run; a second
// client rescues its jobs once their leases expire: 0 duplicates, 0 missing.
func TestCrashGuard(t *testing.T) {
	testenv.Short(t)
	t.Parallel()
	pool, schema := riverSchema(t)
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)

	const n, run = 60, 20
	insertCrashJobs(t, pool, schema, n)
	seen := killWhen(t, crashChild(t, "guard", schema, prefix, run), func(seen map[string]int) bool {
		return seen["ran"] == run && seen["blocked-before-effect"] >= 1
	})
	require.Equal(t, effectStats{Rows: run, Keys: run}, readEffectStats(t, pool), "effects at the kill")
	t.Logf("killed the worker with %d jobs done and %d blocked mid-run", seen["ran"], seen["blocked-before-effect"])

	g := testenv.RedisGuardOn(t, rdb, prefix, &core.Config{Lease: crashLease})
	workers := river.NewWorkers()
	river.AddWorker(workers, MustWrap[crashArgs](g, &crashWorker{pool: pool}, nil))
	waitStuck(t, pool)
	startClient(t, pool, rescueConfig(schema, workers))

	jobs := waitFinished(t, pool, n, 90*time.Second)
	require.Equal(t, n, jobs.Completed)
	require.GreaterOrEqual(t, jobs.WithErrors, seen["blocked-before-effect"], "the blocked jobs were rescued")
	require.Equal(t, effectStats{Rows: n, Keys: n}, readEffectStats(t, pool), "0 duplicates, 0 missing")
}

// TestCrashTx: in transactional mode a kill anywhere, including between the
// effect and the job's completion, leaves 0 duplicates and 0 missing,
// without Redis.
func TestCrashTx(t *testing.T) {
	testenv.Short(t)
	t.Parallel()
	pool, schema := riverSchema(t)
	store, err := pgstore.New(context.Background(), pool, &pgstore.Config{Migrate: true})
	require.NoError(t, err)

	const n, run = 60, 20
	insertCrashJobs(t, pool, schema, n)
	seen := killWhen(t, crashChild(t, "tx", schema, "", run), func(seen map[string]int) bool {
		return seen["done"] >= run && seen["blocked-after-effect"] >= 1 && seen["blocked-before-commit"] >= 1
	})
	t.Logf("killed the worker: %v", seen)
	// Uncommitted effects vanished with the dead worker's transactions.
	effects := readEffectStats(t, pool)
	require.Zero(t, effects.Duplicated)
	require.GreaterOrEqual(t, effects.Rows, run)

	workers := river.NewWorkers()
	river.AddWorker(workers, MustWrapTx[crashArgs](txGuard(t, store), &crashTxWorker{}, nil))
	waitStuck(t, pool)
	startClient(t, pool, rescueConfig(schema, workers))

	jobs := waitFinished(t, pool, n, 90*time.Second)
	require.Equal(t, n, jobs.Completed)
	require.GreaterOrEqual(t, jobs.WithErrors, seen["blocked-after-effect"]+seen["blocked-before-commit"], "the blocked jobs were rescued")
	require.Equal(t, effectStats{Rows: n, Keys: n}, readEffectStats(t, pool), "0 duplicates, 0 missing")
}

// waitStuck waits until every running job has run longer than the rescue
// client's RescueStuckJobsAfter, so that its rescuer's first pass (at start;
// the next is 30s later) rescues them all.
func waitStuck(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	require.Eventually(t, func() bool {
		var young int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job
			WHERE state = 'running' AND attempted_at > now() - interval '700 milliseconds'`).Scan(&young)
		return err == nil && young == 0
	}, 10*time.Second, 20*time.Millisecond)
}

func insertCrashJobs(t *testing.T, pool *pgxpool.Pool, schema string, n int) {
	t.Helper()
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: crashArgs{N: i}}
	}
	_, err := insertClient(t, pool, schema).InsertMany(context.Background(), params)
	require.NoError(t, err)
}
