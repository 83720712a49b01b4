package asynqonce_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	asynqonce "github.com/jobonce/jobonce/adapters/asynq"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/testenv"
)

// hotKey is a server of 10 workers whose "long" task blocks until the test
// releases it, and whose "short" tasks record their effect at once.
type hotKey struct {
	e       *asynqEnv
	outs    testenv.Outcomes
	fx      *effects
	runs    atomic.Int64 // runs of the long task
	started chan struct{}
	release chan struct{}
	once    sync.Once
}

// startHotKey starts the server, with copies waiting up to 10 minutes for a
// running copy, so that a pool of waiting copies would stay taken while the
// long task runs.
func startHotKey(t *testing.T) *hotKey {
	t.Helper()
	h := &hotKey{e: newAsynqEnv(t), fx: newEffects(), started: make(chan struct{}), release: make(chan struct{})}
	g := testenv.RedisGuard(t, &core.Config{Observer: h.outs.Observe})
	mux := asynq.NewServeMux()
	mux.Use(asynqonce.MustMiddleware(g, &asynqonce.Config{WaitRunning: 10 * time.Minute}))
	mux.HandleFunc("long", func(ctx context.Context, _ *asynq.Task) error {
		if h.runs.Add(1) == 1 {
			close(h.started)
			<-h.release
		}
		h.fx.add("long")
		return nil
	})
	mux.HandleFunc("short", func(ctx context.Context, task *asynq.Task) error {
		h.fx.add(string(task.Payload()))
		return nil
	})
	h.e.start(t, h.e.serverConfig(10), mux)
	t.Cleanup(h.releaseLong) // before the server shuts down
	return h
}

// releaseLong lets the long task end.
func (h *hotKey) releaseLong() { h.once.Do(func() { close(h.release) }) }

// runLong enqueues the long task and returns once it runs.
func (h *hotKey) runLong(t *testing.T) {
	t.Helper()
	h.e.enqueue(t, asynq.NewTask("long", []byte("K")))
	select {
	case <-h.started:
	case <-time.After(time.Minute):
		t.Fatal("the long task did not start")
	}
}

// shorts enqueues n short tasks and returns their payloads.
func (h *hotKey) shorts(t *testing.T, n int) []string {
	t.Helper()
	names := make([]string, n)
	for i := range names {
		names[i] = "short-" + strconv.Itoa(i)
		h.e.enqueue(t, asynq.NewTask("short", []byte(names[i])))
	}
	return names
}

// shortsDone reports how many of names have had their effect.
func (h *hotKey) shortsDone(names []string) int {
	n := 0
	for _, name := range names {
		n += h.fx.count(name)
	}
	return n
}

// A pool of 10 workers, one task running until the test releases it and 50
// copies of it enqueued before 20 unrelated tasks: the unrelated tasks all complete
// while the long task still runs, since one copy of a key waits and the
// others go back to Asynq's retry set; once the long task ends, every copy
// is acknowledged as a duplicate, none archived, and the effect happened
// once.
func TestCopiesOfARunningTaskLeaveThePoolToOtherTasks(t *testing.T) {
	t.Parallel()
	h := startHotKey(t)
	h.runLong(t)
	for range 50 {
		h.e.enqueue(t, asynq.NewTask("long", []byte("K")))
	}
	names := h.shorts(t, 20)

	require.Eventually(t, func() bool { return h.shortsDone(names) == len(names) }, time.Minute, 20*time.Millisecond,
		"unrelated tasks done while the long task runs: %d of %d", h.shortsDone(names), len(names))
	require.Zero(t, h.fx.count("long"), "the long task still runs")
	h.releaseLong()

	qi := h.e.waitEmpty(t, time.Minute)
	require.Equal(t, 1, h.fx.count("long"), "the long task's effect")
	require.Equal(t, len(names), h.shortsDone(names))
	require.Zero(t, qi.Archived, "archived")
	require.Zero(t, qi.FailedTotal, "failed")
	require.EqualValues(t, 1+len(names), h.outs.Get(core.Ran))
	require.EqualValues(t, 50, h.outs.Get(core.Duplicate), "every copy acknowledged as a duplicate")
	t.Logf("copies sent back to Asynq while the long task ran: %d", h.outs.Get(core.Running))
}

// Copies with no retries left (MaxRetry(0)), more of them than the Guard
// lets wait of other copies, each hold their worker slot and wait for the
// running copy (core.Job.HoldsWorker): Asynq would archive them if they
// went back. The other slots serve unrelated tasks meanwhile, and once the
// long task ends every copy is acknowledged as a duplicate, none archived.
func TestCopiesWithNoRetriesLeftHoldTheirSlotsUntilTheRunningCopyEnds(t *testing.T) {
	t.Parallel()
	h := startHotKey(t)
	h.runLong(t)
	const exhausted = 3
	for range exhausted {
		h.e.enqueue(t, asynq.NewTask("long", []byte("K")), asynq.MaxRetry(0))
	}
	require.Eventually(t, func() bool { return h.e.info(t).Active == 1+exhausted }, time.Minute, 20*time.Millisecond,
		"each copy with no retries left holds its slot")
	names := h.shorts(t, 20)

	require.Eventually(t, func() bool { return h.shortsDone(names) == len(names) }, time.Minute, 20*time.Millisecond,
		"unrelated tasks done while the long task runs: %d of %d", h.shortsDone(names), len(names))
	// A short task's effect is counted before Asynq acknowledges it: the
	// pool is read once the last short task has left the active set.
	var qi *asynq.QueueInfo
	require.Eventually(t, func() bool { qi = h.e.info(t); return qi.Active <= 1+exhausted }, time.Minute, 20*time.Millisecond,
		"short tasks acknowledged")
	require.Equal(t, 1+exhausted, qi.Active, "the copies still hold their slots")
	require.Zero(t, qi.Archived+qi.Retry, "no copy archived or sent back")
	h.releaseLong()

	qi = h.e.waitEmpty(t, time.Minute)
	require.Equal(t, 1, h.fx.count("long"), "the long task's effect")
	require.Zero(t, qi.Archived, "archived")
	require.EqualValues(t, exhausted, h.outs.Get(core.Duplicate), "every copy acknowledged as a duplicate")
}
