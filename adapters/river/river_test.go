package riveronce

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/pgstore"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// TestEveryCopyOnce inserts 500 jobs twice each (same args, different job
// IDs) and works them with 16 workers, with Wrap and the middleware on Redis,
// with WrapTx on PostgreSQL alone, and with WrapTx under the middleware (no
// kind exempted): every effect happens once, every copy completes on its
// first attempt, none is discarded or cancelled.
func TestEveryCopyOnce(t *testing.T) {
	testenv.Short(t)
	t.Parallel()
	for _, form := range []string{"Wrap", "Middleware", "WrapTx", "WrapTxUnderMiddleware"} {
		t.Run(form, func(t *testing.T) {
			t.Parallel()
			pool, schema := riverSchema(t)
			workers := river.NewWorkers()
			cfg := clientConfig(schema, workers, 16)
			switch form {
			case "Wrap":
				// Every copy may wait for its twin (WaitingShare 1): one copy
				// of a key waits at a time, and a key has two.
				g := testenv.RedisGuard(t, &core.Config{MaxRetryAfter: 200 * time.Millisecond, WaitingShare: 1})
				river.AddWorker(workers, MustWrap[effectArgs](g, &effectWorker{pool: pool}, nil))
			case "Middleware":
				g := testenv.RedisGuard(t, &core.Config{MaxRetryAfter: 200 * time.Millisecond, WaitingShare: 1})
				river.AddWorker(workers, &effectWorker{pool: pool})
				cfg.Middleware = []rivertype.Middleware{MustMiddleware(g, nil)}
			case "WrapTx", "WrapTxUnderMiddleware":
				store, err := pgstore.New(context.Background(), pool, &pgstore.Config{Migrate: true, RetryAfter: 200 * time.Millisecond})
				require.NoError(t, err)
				river.AddWorker(workers, MustWrapTx[effectArgs](txGuard(t, store), effectTxWorker{}, nil))
				if form == "WrapTxUnderMiddleware" {
					cfg.Middleware = []rivertype.Middleware{MustMiddleware(testenv.RedisGuard(t, nil), nil)}
				}
			}

			const n = 500
			params := make([]river.InsertManyParams, 0, 2*n)
			for i := range n {
				args := effectArgs{N: i, Sleep: 5 * time.Millisecond}
				params = append(params, river.InsertManyParams{Args: args}, river.InsertManyParams{Args: args})
			}
			_, err := insertClient(t, pool, schema).InsertMany(context.Background(), params)
			require.NoError(t, err)
			startClient(t, pool, cfg)

			jobs := waitFinished(t, pool, 2*n, 2*time.Minute)
			require.Equal(t, 2*n, jobs.Completed, "every copy completed")
			require.Zero(t, jobs.Cancelled)
			require.Zero(t, jobs.Discarded)
			require.Equal(t, 1, jobs.MaxAttempt, "no copy used a second attempt")
			require.Zero(t, jobs.WithErrors)
			effects := readEffectStats(t, pool)
			require.Equal(t, effectStats{Rows: n, Keys: n}, effects, "every effect once")
			if form == "Wrap" || form == "Middleware" {
				// A copy that meets an open transaction's record waits for
				// it (up to pgstore's LockTimeout) and mostly finds it done;
				// one that meets a claim waits for the completion signal.
				require.Zero(t, jobs.Snoozed, "copies that found their twin running waited for it, not snoozed")
			}
			t.Logf("%s: %d copies completed, %d snoozed at least once", form, jobs.Completed, jobs.Snoozed)
		})
	}
}

// effectTxWorker writes the effect in the job's transaction.
type effectTxWorker struct {
	river.WorkerDefaults[effectArgs]
}

func (effectTxWorker) WorkTx(ctx context.Context, tx pgx.Tx, job *river.Job[effectArgs]) error {
	if job.Args.Sleep > 0 {
		time.Sleep(job.Args.Sleep)
	}
	_, err := tx.Exec(ctx, `INSERT INTO effects (key, job_id) VALUES ($1, $2)`, job.Args.key(), job.ID)
	return err
}

// longArgs is a job that runs until the test releases it, ignoring its
// context, as a worker stuck in an uncancellable call would.
type longArgs struct {
	N int `json:"n"`
}

func (longArgs) Kind() string { return "riveronce_long" }

type longWorker struct {
	river.WorkerDefaults[longArgs]
	pool    *pgxpool.Pool
	started chan struct{}
	release chan struct{}
	runs    atomic.Int32
}

func (w *longWorker) Work(ctx context.Context, job *river.Job[longArgs]) error {
	if w.runs.Add(1) == 1 {
		close(w.started)
		<-w.release
	}
	return insertEffect(ctx, w.pool, "long", job.ID)
}

// TestRescueWhileRunning: River rescues a job that has run longer than
// RescueStuckJobsAfter although its worker lives; the guard's heartbeated
// lease makes the rescued copy snooze instead of running it again.
func TestRescueWhileRunning(t *testing.T) {
	testenv.Short(t)
	t.Parallel()
	pool, schema := riverSchema(t)
	// The lease is shorter than the job (which runs until the rescued copy has
	// snoozed twice, seconds): only the heartbeat keeps it. At 2 s, renewed
	// every 667 ms, a loaded machine's pauses do not lapse it.
	g := testenv.RedisGuard(t, &core.Config{Lease: 2 * time.Second})
	worker := &longWorker{pool: pool, started: make(chan struct{}), release: make(chan struct{})}
	workers := river.NewWorkers()
	river.AddWorker(workers, MustWrap[longArgs](g, worker, nil))

	newConfig := func() *river.Config {
		cfg := clientConfig(schema, workers, 4)
		cfg.JobTimeout = 300 * time.Millisecond
		cfg.RescueStuckJobsAfter = 300 * time.Millisecond
		return cfg
	}
	// The first client works the job but never leads, so it runs no rescuer.
	first := newConfig()
	first.LeaderElectionDisabled = true
	startClient(t, pool, first)
	res, err := insertClient(t, pool, schema).Insert(context.Background(), longArgs{N: 1}, nil)
	require.NoError(t, err)
	<-worker.started

	// Once the job is past RescueStuckJobsAfter, a leading client starts; its
	// rescuer runs at once and puts the job back in the queue.
	require.Eventually(t, func() bool {
		var stuck bool
		err := pool.QueryRow(context.Background(),
			`SELECT attempted_at < now() - interval '400 milliseconds' FROM river_job WHERE id = $1`, res.Job.ID).Scan(&stuck)
		return err == nil && stuck
	}, 10*time.Second, 20*time.Millisecond)
	startClient(t, pool, newConfig())

	// The rescued copy is fetched again and finds the claim live: it snoozes.
	require.Eventually(t, func() bool {
		var errs, snoozes int
		err := pool.QueryRow(context.Background(),
			`SELECT coalesce(array_length(errors, 1), 0), coalesce((metadata->>'snoozes')::int, 0) FROM river_job WHERE id = $1`,
			res.Job.ID).Scan(&errs, &snoozes)
		return err == nil && errs >= 1 && snoozes >= 2
	}, 30*time.Second, 20*time.Millisecond, "the rescued copy should snooze while the first runs")
	close(worker.release)

	jobs := waitFinished(t, pool, 1, 30*time.Second)
	require.Equal(t, 1, jobs.Completed)
	require.Equal(t, effectStats{Rows: 1, Keys: 1}, readEffectStats(t, pool), "one effect")
	require.EqualValues(t, 1, worker.runs.Load(), "the rescued copy never ran the worker")
}

// flakyArgs fails its first attempt.
type flakyArgs struct {
	N int `json:"n"`
}

func (flakyArgs) Kind() string { return "riveronce_flaky" }

var errFlaky = errors.New("first attempt fails")

type flakyWorker struct {
	river.WorkerDefaults[flakyArgs]
	pool *pgxpool.Pool
}

func (w *flakyWorker) Work(ctx context.Context, job *river.Job[flakyArgs]) error {
	if job.Attempt == 1 {
		return errFlaky
	}
	return insertEffect(ctx, w.pool, "flaky", job.ID)
}

// TestHandlerError: a failed attempt releases the claim, River retries with
// its own policy, and the retry runs the job at once.
func TestHandlerError(t *testing.T) {
	testenv.Short(t)
	t.Parallel()
	pool, schema := riverSchema(t)
	g := testenv.RedisGuard(t, nil)
	workers := river.NewWorkers()
	river.AddWorker(workers, &flakyWorker{pool: pool})
	cfg := clientConfig(schema, workers, 4)
	cfg.Middleware = []rivertype.Middleware{MustMiddleware(g, nil)}
	startClient(t, pool, cfg)
	_, err := insertClient(t, pool, schema).Insert(context.Background(), flakyArgs{N: 1}, nil)
	require.NoError(t, err)

	jobs := waitFinished(t, pool, 1, 30*time.Second)
	require.Equal(t, 1, jobs.Completed)
	require.Equal(t, 2, jobs.MaxAttempt, "the error used an attempt; the retry ran")
	var errText string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT errors[1]->>'error' FROM river_job`).Scan(&errText))
	require.Equal(t, errFlaky.Error(), errText, "the worker's error reached River unchanged")
	require.Equal(t, effectStats{Rows: 1, Keys: 1}, readEffectStats(t, pool))
}

// TestStoreOutage: with the guard's Redis unreachable, jobs do not run and
// River retries them; once Redis is back every job runs once. Nothing is lost.
func TestStoreOutage(t *testing.T) {
	testenv.Short(t)
	t.Parallel()
	pool, schema := riverSchema(t)
	prefix := testenv.Prefix(t)
	real := testenv.Redis(t, prefix)

	// A port nothing listens on, for now.
	addr := testenv.ClosedAddr(t)
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = client.Close() })
	store, err := redisstore.New(client, &redisstore.Config{SkipEvictionCheck: true})
	require.NoError(t, err)
	g, err := core.New(store, &core.Config{KeyPrefix: prefix, Logger: discardLogger()})
	require.NoError(t, err)

	workers := river.NewWorkers()
	river.AddWorker(workers, MustWrap[effectArgs](g, &effectWorker{pool: pool}, nil))
	cfg := clientConfig(schema, workers, 4)
	cfg.Logger = discardLogger()
	startClient(t, pool, cfg)
	const n = 20
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: effectArgs{N: i}}
	}
	_, err = insertClient(t, pool, schema).InsertMany(context.Background(), params)
	require.NoError(t, err)

	// Every job fails closed at least twice: not run, not completed, retried.
	require.Eventually(t, func() bool {
		var failedTwice int
		err := pool.QueryRow(context.Background(),
			`SELECT count(*) FROM river_job WHERE coalesce(array_length(errors, 1), 0) >= 2`).Scan(&failedTwice)
		return err == nil && failedTwice == n
	}, 30*time.Second, 20*time.Millisecond)
	jobs := readJobStats(t, pool)
	require.Zero(t, jobs.Completed+jobs.Discarded+jobs.Cancelled)
	require.Zero(t, readEffectStats(t, pool).Rows, "no job ran without the guard")
	var errText string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT errors[1]->>'error' FROM river_job LIMIT 1`).Scan(&errText))
	require.Contains(t, errText, core.ErrStoreUnavailable.Error())

	// Redis comes back on the same address.
	testenv.StartProxy(t, addr, real.Options().Addr)
	jobs = waitFinished(t, pool, n, 60*time.Second)
	require.Equal(t, n, jobs.Completed)
	require.Equal(t, effectStats{Rows: n, Keys: n}, readEffectStats(t, pool), "every job ran once")
}

type keyedWorker struct {
	river.WorkerDefaults[keyedArgs]
	pool *pgxpool.Pool
}

func (w *keyedWorker) Work(ctx context.Context, job *river.Job[keyedArgs]) error {
	return insertEffect(ctx, w.pool, job.Args.OnceKey(), job.ID)
}

// TestMiddlewareKeyer: a client with the middleware records OnceKey in the
// job's metadata at insert, and the middleware claims that key when the job
// is worked.
func TestMiddlewareKeyer(t *testing.T) {
	testenv.Short(t)
	t.Parallel()
	pool, schema := riverSchema(t)
	var mu sync.Mutex
	var keys []string
	g := testenv.RedisGuard(t, &core.Config{MaxRetryAfter: 200 * time.Millisecond, Observer: func(_ context.Context, e core.Event) {
		mu.Lock()
		defer mu.Unlock()
		keys = append(keys, e.Outcome.String()+" "+e.Key)
	}})
	mw := MustMiddleware(g, nil)
	workers := river.NewWorkers()
	river.AddWorker(workers, &keyedWorker{pool: pool})
	cfg := clientConfig(schema, workers, 4)
	cfg.Middleware = []rivertype.Middleware{mw}
	client := startClient(t, pool, cfg)
	_, err := client.InsertMany(context.Background(), []river.InsertManyParams{
		{Args: keyedArgs{User: "9"}}, {Args: keyedArgs{User: "9"}},
	})
	require.NoError(t, err)

	jobs := waitFinished(t, pool, 2, 30*time.Second)
	require.Equal(t, 2, jobs.Completed)
	require.Equal(t, effectStats{Rows: 1, Keys: 1}, readEffectStats(t, pool))
	var recorded int
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT count(*) FROM river_job WHERE metadata->>'jobonce_key' = 'email:welcome:9'`).Scan(&recorded))
	require.Equal(t, 2, recorded, "the key was recorded at insert")
	mu.Lock()
	defer mu.Unlock()
	require.Contains(t, keys, "ran email:welcome:9")
	require.Contains(t, keys, "duplicate email:welcome:9")
}

// keyWorker sends the idempotency key its job's context carries.
type keyWorker struct {
	river.WorkerDefaults[effectArgs]
	keys chan string
}

func (w *keyWorker) Work(ctx context.Context, _ *river.Job[effectArgs]) error {
	key, _ := core.IdempotencyKey(ctx)
	w.keys <- key
	return nil
}

// TestShadowModeAndJobContext: with a real River client, in shadow mode
// both copies of a job run (the second reported with WouldSkip), with one
// idempotency key; every event names River and the kind. The
// transactional form honours shadow mode too.
func TestShadowModeAndJobContext(t *testing.T) {
	testenv.Short(t)
	t.Parallel()
	for _, form := range []string{"Middleware", "WrapTx"} {
		t.Run(form, func(t *testing.T) {
			t.Parallel()
			pool, schema := riverSchema(t)
			var outs testenv.Outcomes
			workers := river.NewWorkers()
			cfg := clientConfig(schema, workers, 1) // one at a time: the second copy is a duplicate
			keys := make(chan string, 2)
			switch form {
			case "Middleware":
				g := testenv.RedisGuard(t, &core.Config{Shadow: true, Observer: outs.Observe})
				river.AddWorker(workers, &keyWorker{keys: keys})
				cfg.Middleware = []rivertype.Middleware{MustMiddleware(g, nil)}
			case "WrapTx":
				store, err := pgstore.New(context.Background(), pool, &pgstore.Config{Migrate: true})
				require.NoError(t, err)
				g := testenv.NewGuard(t, store, &core.Config{Shadow: true, Observer: outs.Observe})
				tg, err := core.NewTxGuard[pgx.Tx](g)
				require.NoError(t, err)
				river.AddWorker(workers, MustWrapTx[effectArgs](tg, keyTxWorker{keys: keys}, nil))
			}
			args := effectArgs{N: 7}
			_, err := insertClient(t, pool, schema).InsertMany(context.Background(),
				[]river.InsertManyParams{{Args: args}, {Args: args}})
			require.NoError(t, err)
			startClient(t, pool, cfg)
			first, second := <-keys, <-keys
			require.NotEmpty(t, first)
			require.Equal(t, first, second, "one idempotency key for both copies")
			jobs := waitFinished(t, pool, 2, time.Minute)
			require.Equal(t, 2, jobs.Completed)
			// WrapTx reports an outcome once its transaction committed,
			// which completes the job: the event may follow the row.
			require.Eventually(t, func() bool { return len(outs.Events()) == 2 }, time.Minute, time.Millisecond, "both outcomes observed")
			var would []core.Outcome
			for _, ev := range outs.Events() {
				require.Equal(t, "river", ev.Source)
				require.Equal(t, "riveronce_effect", ev.Kind)
				would = append(would, ev.WouldSkip)
			}
			require.Equal(t, []core.Outcome{0, core.Duplicate}, would)
		})
	}
}

// keyTxWorker is keyWorker in the transactional form.
type keyTxWorker struct {
	river.WorkerDefaults[effectArgs]
	keys chan string
}

func (w keyTxWorker) WorkTx(ctx context.Context, _ pgx.Tx, _ *river.Job[effectArgs]) error {
	key, _ := core.IdempotencyKey(ctx)
	w.keys <- key
	return nil
}
