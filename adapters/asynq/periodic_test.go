package asynqonce_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	asynqonce "github.com/jobonce/jobonce/adapters/asynq"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/testenv"
)

// taskRuns counts a handler's runs by task ID.
type taskRuns struct {
	mu  sync.Mutex
	ids []string
	n   map[string]int
}

func (r *taskRuns) handle(ctx context.Context, _ *asynq.Task) error {
	id, _ := asynq.GetTaskID(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	if r.n[id] == 0 {
		r.ids = append(r.ids, id)
	}
	r.n[id]++
	return nil
}

// snapshot returns the task IDs in the order they first ran, and the runs of
// each.
func (r *taskRuns) snapshot() ([]string, map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := make(map[string]int, len(r.n))
	for id, c := range r.n {
		n[id] = c
	}
	return append([]string(nil), r.ids...), n
}

// TestSchedulerTasksOfAPeriodicTypeRunEveryOccurrence: an asynq.Scheduler
// enqueues one task, with one payload, every second; listed in
// PeriodicTypes, each occurrence runs once, even under a Config.Key that
// gives every task one key, while a copy of a task (its queue and ID) is
// acknowledged as a duplicate without running.
func TestSchedulerTasksOfAPeriodicTypeRunEveryOccurrence(t *testing.T) {
	t.Parallel()
	e := newAsynqEnv(t)
	var outs testenv.Outcomes
	g := testenv.RedisGuard(t, &core.Config{Observer: outs.Observe})
	var runs taskRuns
	mux := asynq.NewServeMux()
	mux.Use(asynqonce.MustMiddleware(g, &asynqonce.Config{
		PeriodicTypes: []string{"report"},
		Key:           func(*asynq.Task) string { return "one key for all" },
	}))
	mux.HandleFunc("report", runs.handle)
	e.start(t, e.serverConfig(2), mux)

	scheduler := asynq.NewScheduler(e.opt, &asynq.SchedulerOpts{LogLevel: asynq.ErrorLevel})
	_, err := scheduler.Register("@every 1s", asynq.NewTask("report", []byte(`{"scope":"all"}`)), asynq.Queue(e.queue))
	require.NoError(t, err)
	require.NoError(t, scheduler.Start())
	require.Eventually(t, func() bool {
		ids, _ := runs.snapshot()
		return len(ids) >= 3
	}, 30*time.Second, 50*time.Millisecond, "the scheduler's occurrences did not run")
	scheduler.Shutdown()
	e.waitEmpty(t, 10*time.Second)

	ids, n := runs.snapshot()
	require.GreaterOrEqual(t, len(ids), 3)
	for id, c := range n {
		require.Equal(t, 1, c, "occurrence %s ran once", id)
	}
	require.EqualValues(t, len(ids), outs.Get(core.Ran))

	e.enqueue(t, asynq.NewTask("report", []byte(`{"scope":"all"}`)), asynq.TaskID(ids[0])) // the first task again
	require.Eventually(t, func() bool { return outs.Get(core.Duplicate) == 1 }, 10*time.Second, 20*time.Millisecond)
	_, n = runs.snapshot()
	require.Equal(t, 1, n[ids[0]], "a copy of a task does not run")
	t.Logf("%d occurrences ran once each", len(ids))
}

// TestFirstSkipIsLoggedAtInfo: three tasks of one type with an empty
// payload run once under the default key, and the first skip is logged at
// Info, naming asynqonce's settings; the second at Debug. Listed in
// PeriodicTypes, the same three tasks all run and nothing is logged at Info.
func TestFirstSkipIsLoggedAtInfo(t *testing.T) {
	t.Parallel()
	for _, periodic := range []bool{false, true} {
		e := newAsynqEnv(t)
		var logs testenv.Records
		g := testenv.RedisGuard(t, &core.Config{Logger: logs.Logger()})
		var cfg asynqonce.Config
		if periodic {
			cfg.PeriodicTypes = []string{"cache:refresh"}
		}
		var runs taskRuns
		mux := asynq.NewServeMux()
		mux.Use(asynqonce.MustMiddleware(g, &cfg))
		mux.HandleFunc("cache:refresh", runs.handle)
		for range 3 {
			e.enqueue(t, asynq.NewTask("cache:refresh", nil))
		}
		e.start(t, e.serverConfig(1), mux) // one at a time: each copy finds the one before done
		e.waitEmpty(t, 10*time.Second)

		ids, _ := runs.snapshot()
		var levels []slog.Level
		for _, r := range logs.Where("outcome", "duplicate") {
			require.Equal(t, "cache:refresh", r.Attrs["kind"])
			levels = append(levels, r.Level)
			if r.Level == slog.LevelInfo {
				require.Contains(t, r.Message, "asynqonce: set Config.Key, or list the task type in Config.PeriodicTypes")
				testenv.RequireLag(t, r, time.Minute)
			}
		}
		if periodic {
			require.Len(t, ids, 3, "every task runs")
			require.Empty(t, levels)
			continue
		}
		require.Len(t, ids, 1, "one run under the default key")
		require.Equal(t, []slog.Level{slog.LevelInfo, slog.LevelDebug}, levels)
	}
}

// TestPeriodicTypeOutsideAServerIsRejected: a periodic type's task without
// an Asynq task ID in its context (its handler called directly) does not
// run, with an error naming the type and the setting, and is archived.
func TestPeriodicTypeOutsideAServerIsRejected(t *testing.T) {
	t.Parallel()
	var outs testenv.Outcomes
	var runs taskRuns
	h := asynqonce.MustMiddleware(testenv.MemGuard(t, &core.Config{Observer: outs.Observe}),
		&asynqonce.Config{PeriodicTypes: []string{"report"}})(asynq.HandlerFunc(runs.handle))
	err := h.ProcessTask(context.Background(), asynq.NewTask("report", nil))
	require.ErrorIs(t, err, core.ErrInvalidKey)
	require.ErrorIs(t, err, asynq.SkipRetry)
	require.ErrorContains(t, err, `task type "report" is in Config.PeriodicTypes`)
	require.EqualValues(t, 1, outs.Get(core.Rejected))
	ids, _ := runs.snapshot()
	require.Empty(t, ids)

	_, err = asynqonce.NewMiddleware(testenv.MemGuard(t, nil), &asynqonce.Config{PeriodicTypes: []string{"a", "b"}, UnguardedTypes: []string{"b"}})
	require.ErrorContains(t, err, `jobonce: asynqonce: Config.PeriodicTypes and Config.UnguardedTypes both list task type "b"`)
}
