package riveronce

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/pgstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// A client of 10 workers with the middleware on a Guard on pgstore, copies
// waiting up to 10 minutes for a running copy (so that a pool of waiting
// copies would stay taken): one job running until the test releases it,
// 50 copies of it inserted, then 20 unrelated jobs. The unrelated jobs all
// complete while the long job still runs, since one copy of a key waits
// and the others snooze; once it ends, every copy completes as a duplicate
// without using an attempt, and the effect happened once.
func TestCopiesOfARunningJobLeaveThePoolToOtherJobs(t *testing.T) {
	testenv.Short(t)
	t.Parallel()
	ctx := context.Background()
	pool, schema := riverSchema(t)
	store, err := pgstore.New(ctx, pool, &pgstore.Config{Migrate: true})
	require.NoError(t, err)
	var outs testenv.Outcomes
	g := testenv.NewGuard(t, store, &core.Config{Observer: outs.Observe})

	long := &longWorker{pool: pool, started: make(chan struct{}), release: make(chan struct{})}
	workers := river.NewWorkers()
	river.AddWorker(workers, long)
	river.AddWorker(workers, &effectWorker{pool: pool})
	cfg := clientConfig(schema, workers, 10)
	cfg.JobTimeout = -1 // a copy's wait is bounded by WaitRunning alone
	cfg.Middleware = []rivertype.Middleware{MustMiddleware(g, &Config{WaitRunning: 10 * time.Minute})}
	startClient(t, pool, cfg)
	var releaseOnce sync.Once
	releaseLong := func() { releaseOnce.Do(func() { close(long.release) }) }
	t.Cleanup(releaseLong) // before the client stops

	inserter := insertClient(t, pool, schema)
	_, err = inserter.Insert(ctx, longArgs{N: 1}, nil)
	require.NoError(t, err)
	select {
	case <-long.started:
	case <-time.After(time.Minute):
		t.Fatal("the long job did not start")
	}
	const copies, unrelated = 50, 20
	params := make([]river.InsertManyParams, copies)
	for i := range params {
		params[i] = river.InsertManyParams{Args: longArgs{N: 1}}
	}
	_, err = inserter.InsertMany(ctx, params)
	require.NoError(t, err)
	params = make([]river.InsertManyParams, unrelated)
	for i := range params {
		params[i] = river.InsertManyParams{Args: effectArgs{N: i}}
	}
	_, err = inserter.InsertMany(ctx, params)
	require.NoError(t, err)

	require.Eventually(t, func() bool { return readEffectStats(t, pool).Keys == unrelated }, time.Minute, 20*time.Millisecond,
		"unrelated jobs done while the long job runs: effects %+v", readEffectStats(t, pool))
	require.Equal(t, effectStats{Rows: unrelated, Keys: unrelated}, readEffectStats(t, pool), "the long job still runs")
	releaseLong()

	jobs := waitFinished(t, pool, 1+copies+unrelated, time.Minute)
	require.Equal(t, 1+copies+unrelated, jobs.Completed, "every job and copy completed")
	require.Zero(t, jobs.Cancelled+jobs.Discarded)
	require.Equal(t, 1, jobs.MaxAttempt, "no copy used a second attempt")
	require.Zero(t, jobs.WithErrors)
	require.Equal(t, effectStats{Rows: 1 + unrelated, Keys: 1 + unrelated}, readEffectStats(t, pool), "every effect once")
	require.EqualValues(t, 1, long.runs.Load())
	require.EqualValues(t, copies, outs.Get(core.Duplicate))
	t.Logf("copies snoozed: %d jobs, %d snoozes", jobs.Snoozed, outs.Get(core.Running))
}
