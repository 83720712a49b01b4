package asynqonce_test

import (
	"context"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	asynqonce "github.com/jobonce/jobonce/adapters/asynq"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/testenv"
)

const (
	crashEnvQueue     = "JOBONCE_ASYNQ_CRASH_QUEUE"
	crashEnvPrefix    = "JOBONCE_ASYNQ_CRASH_PREFIX"
	crashEnvBlockFrom = "JOBONCE_ASYNQ_CRASH_BLOCK_FROM"
	crashConcurrency  = 16
	crashLease        = 5 * time.Second
)

// A worker process is SIGKILLed while it runs jobs, every job being also
// delivered twice (a second copy 20 tasks behind the first). A second worker
// process finishes the queue: copies of the killed jobs wait until the dead
// worker's claims lapse, and the orphaned tasks Asynq recovers a minute later
// are acknowledged as duplicates. Effects are counted in Redis: every job
// exactly once, nothing archived.
//
// The first worker's jobs from index blockFrom on block inside their work,
// and the kill comes once every worker slot is blocked there: a crash between
// a job's effect and its done marker, the one window in which a separate done
// marker lets a duplicate through, is not what this test measures.
//
// Asynq recovers a task whose worker died only when its 30s lease expired
// more than 30s earlier, on a recoverer tick each minute: the test takes
// about 70s.
func TestCrashRecovery(t *testing.T) {
	t.Parallel()
	e := newAsynqEnv(t)
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	ctx := background(t)

	const jobs, blockFrom, gap = 200, 100, 20
	for i := range jobs + gap {
		if i < jobs {
			e.enqueue(t, crashTask(i))
		}
		if i >= gap {
			e.enqueue(t, crashTask(i-gap))
		}
	}

	first := startCrashWorker(t, e.queue, prefix, blockFrom)
	require.Eventually(t, func() bool {
		n, err := rdb.Get(ctx, prefix+"blocked").Int()
		return err == nil && n == crashConcurrency
	}, 60*time.Second, 20*time.Millisecond, "every worker slot of the first worker should block in a job")
	done, err := rdb.HLen(ctx, prefix+"effects").Result()
	require.NoError(t, err)
	require.EqualValues(t, blockFrom, done, "jobs before blockFrom are done before the kill")
	require.NoError(t, first.Kill())
	killed := time.Now()

	second := startCrashWorker(t, e.queue, prefix, -1)
	qi := e.waitEmpty(t, 150*time.Second)
	t.Logf("queue drained %s after the kill", time.Since(killed).Round(time.Second))
	require.NoError(t, second.Stop(time.Minute))

	counts, err := rdb.HGetAll(ctx, prefix+"effects").Result()
	require.NoError(t, err)
	missing, dups := 0, 0
	for i := range jobs {
		switch n, _ := strconv.Atoi(counts[strconv.Itoa(i)]); {
		case n == 0:
			missing++
		case n > 1:
			dups += n - 1
		}
	}
	require.Zero(t, missing, "missing jobs")
	require.Zero(t, dups, "duplicate effects")
	require.Len(t, counts, jobs)
	require.Zero(t, qi.Archived, "archived")
}

func crashTask(i int) *asynq.Task {
	return asynq.NewTask("crash", []byte(strconv.Itoa(i)))
}

func startCrashWorker(t *testing.T, queue, prefix string, blockFrom int) *testenv.Worker {
	t.Helper()
	return testenv.StartWorker(t, "TestCrashWorker",
		crashEnvQueue+"="+queue, crashEnvPrefix+"="+prefix, crashEnvBlockFrom+"="+strconv.Itoa(blockFrom))
}

// TestCrashWorker is the worker process of TestCrashRecovery; it returns at
// once unless run by it. It serves the queue until SIGTERM.
func TestCrashWorker(t *testing.T) {
	if !testenv.IsWorker(t) {
		return
	}
	queue := os.Getenv(crashEnvQueue)
	prefix := os.Getenv(crashEnvPrefix)
	blockFrom, err := strconv.Atoi(os.Getenv(crashEnvBlockFrom))
	require.NoError(t, err)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()

	opt, err := redis.ParseURL(testenv.RedisURL())
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	g := testenv.RedisGuardOn(t, rdb, prefix, &core.Config{Lease: crashLease})

	mux := asynq.NewServeMux()
	mux.Use(asynqonce.MustMiddleware(g, nil))
	mux.HandleFunc("crash", func(ctx context.Context, task *asynq.Task) error {
		i, err := strconv.Atoi(string(task.Payload()))
		if err != nil {
			return err
		}
		if blockFrom >= 0 && i >= blockFrom {
			rdb.Incr(ctx, prefix+"blocked")
			<-ctx.Done() // the work outlives this process
			return ctx.Err()
		}
		time.Sleep(time.Millisecond) // the work
		return rdb.HIncrBy(ctx, prefix+"effects", string(task.Payload()), 1).Err()
	})
	e := &asynqEnv{queue: queue}
	e.opt, err = asynq.ParseRedisURI(testenv.RedisURL())
	require.NoError(t, err)
	srv := asynq.NewServer(e.opt, e.serverConfig(crashConcurrency))
	require.NoError(t, srv.Start(mux))
	<-ctx.Done()
	srv.Shutdown()
}
