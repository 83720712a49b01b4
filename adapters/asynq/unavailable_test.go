package asynqonce_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	asynqonce "github.com/jobonce/jobonce/adapters/asynq"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// While the Guard's Redis is unreachable no job runs and no task is
// acknowledged or archived; once it is back, every job is done exactly once.
func TestStoreUnavailableFailsClosed(t *testing.T) {
	t.Parallel()
	e := newAsynqEnv(t)
	prefix := testenv.Prefix(t)
	direct := testenv.Redis(t, prefix) // deletes the keys at cleanup

	// The Guard's Redis address: a closed port for now.
	addr := testenv.ClosedAddr(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr, DB: direct.Options().DB, Password: direct.Options().Password,
		DialTimeout: 200 * time.Millisecond, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := redisstore.New(rdb, &redisstore.Config{SkipEvictionCheck: true})
	require.NoError(t, err)
	var outs testenv.Outcomes
	g, err := core.New(store, &core.Config{KeyPrefix: prefix, Observer: outs.Observe, Logger: quiet})
	require.NoError(t, err)

	fx := newEffects()
	h := asynqonce.MustMiddleware(g, nil)(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		fx.add(string(task.Payload()))
		return nil
	}))
	const jobs = 20
	for i := range jobs - 1 {
		e.enqueue(t, asynq.NewTask("job", []byte(strconv.Itoa(i))))
	}
	// A task with no retries left waits for the store rather than being archived.
	e.enqueue(t, asynq.NewTask("job", []byte(strconv.Itoa(jobs-1))), asynq.MaxRetry(0))
	e.start(t, e.serverConfig(4), h)

	require.Eventually(t, func() bool { return outs.Get(core.Unavailable) >= 2*jobs }, 30*time.Second, 20*time.Millisecond,
		"every job should have failed closed at least twice")
	require.Zero(t, fx.total(), "no job ran")
	qi := e.info(t)
	require.Equal(t, jobs, qi.Pending+qi.Active+qi.Retry, "no task was acknowledged")
	require.Zero(t, qi.Archived)

	t.Logf("failed closed: %d", outs.Get(core.Unavailable))
	testenv.StartProxy(t, addr, direct.Options().Addr) // the store is back
	t.Log("store back")
	qi = e.waitEmpty(t, 60*time.Second)
	for i := range jobs {
		require.Equal(t, 1, fx.count(strconv.Itoa(i)), "job %d", i)
	}
	require.Zero(t, qi.Archived)
}
