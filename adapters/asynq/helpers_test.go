package asynqonce_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	asynqonce "github.com/jobonce/jobonce/adapters/asynq"
	"github.com/jobonce/jobonce/internal/testenv"
)

// asynqEnv is one test's Asynq queue on the test Redis: a queue name of its
// own, a client and an inspector, and the queue deleted at cleanup.
type asynqEnv struct {
	opt       asynq.RedisConnOpt
	queue     string
	client    *asynq.Client
	inspector *asynq.Inspector
}

func newAsynqEnv(t testing.TB) *asynqEnv {
	t.Helper()
	testenv.Short(t)
	opt, err := asynq.ParseRedisURI(testenv.RedisURL())
	require.NoError(t, err)
	e := &asynqEnv{
		opt:       opt,
		queue:     "jobonce-test-" + testenv.RandomID(6),
		client:    asynq.NewClient(opt),
		inspector: asynq.NewInspector(opt),
	}
	require.NoError(t, e.client.Ping(), "Redis at %s does not answer (start it with scripts/test.sh)", testenv.RedisURL())
	t.Cleanup(func() {
		_ = e.inspector.DeleteQueue(e.queue, true)
		_ = e.inspector.Close()
		_ = e.client.Close()
	})
	return e
}

// serverConfig is the Asynq configuration the tests use: the middleware's
// IsFailure and RetryDelay, a 1s fallback retry delay and a 1s forwarder, so
// retries come quickly.
func (e *asynqEnv) serverConfig(concurrency int) asynq.Config {
	return asynq.Config{
		Concurrency:              concurrency,
		Queues:                   map[string]int{e.queue: 1},
		IsFailure:                asynqonce.IsFailure,
		RetryDelayFunc:           asynqonce.RetryDelayOr(func(int, error, *asynq.Task) time.Duration { return time.Second }),
		DelayedTaskCheckInterval: time.Second,
		TaskCheckInterval:        50 * time.Millisecond,
		LogLevel:                 asynq.ErrorLevel,
		ShutdownTimeout:          10 * time.Second,
	}
}

// start runs an Asynq server with h until the end of the test.
func (e *asynqEnv) start(t testing.TB, cfg asynq.Config, h asynq.Handler) *asynq.Server {
	t.Helper()
	srv := asynq.NewServer(e.opt, cfg)
	require.NoError(t, srv.Start(h))
	t.Cleanup(srv.Shutdown)
	return srv
}

func (e *asynqEnv) enqueue(t testing.TB, task *asynq.Task, opts ...asynq.Option) *asynq.TaskInfo {
	t.Helper()
	info, err := e.client.Enqueue(task, append([]asynq.Option{asynq.Queue(e.queue)}, opts...)...)
	require.NoError(t, err)
	return info
}

func (e *asynqEnv) info(t testing.TB) *asynq.QueueInfo {
	t.Helper()
	qi, err := e.inspector.GetQueueInfo(e.queue)
	require.NoError(t, err)
	return qi
}

// waitEmpty waits until the queue holds no pending, active, scheduled or
// retrying task.
func (e *asynqEnv) waitEmpty(t testing.TB, within time.Duration) *asynq.QueueInfo {
	t.Helper()
	var qi *asynq.QueueInfo
	require.Eventually(t, func() bool {
		qi = e.info(t)
		return qi.Pending+qi.Active+qi.Scheduled+qi.Retry == 0
	}, within, 50*time.Millisecond, "queue did not drain")
	return qi
}

// quiet discards the Guard's log records in tests that provoke warnings.
var quiet = slog.New(slog.DiscardHandler)

func background(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
