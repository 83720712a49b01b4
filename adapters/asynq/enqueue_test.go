package asynqonce_test

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	asynqonce "github.com/jobonce/jobonce/adapters/asynq"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/testenv"
)

// replyDelay forwards connections to a server and, while held, keeps each
// reply back until Release: a network that delays replies past a client's
// read timeout, after the server has acted on the request.
type replyDelay struct {
	ln       net.Listener
	wg       sync.WaitGroup
	mu       sync.Mutex
	held     chan struct{} // closed when replies flow; replaced by Hold
	conns    []net.Conn
	released bool
}

func startReplyDelay(t testing.TB, target string) *replyDelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	d := &replyDelay{ln: ln, held: make(chan struct{})}
	close(d.held)
	d.wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				_ = in.Close()
				continue
			}
			d.mu.Lock()
			d.conns = append(d.conns, in, out)
			d.mu.Unlock()
			d.wg.Go(func() { copyRequests(out, in) })
			d.wg.Go(func() { d.copyReplies(in, out) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		d.Release()
		d.mu.Lock()
		for _, c := range d.conns {
			_ = c.Close()
		}
		d.mu.Unlock()
		d.wg.Wait()
	})
	return d
}

func (d *replyDelay) Addr() string { return d.ln.Addr().String() }

// Hold keeps replies back from now on.
func (d *replyDelay) Hold() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.held = make(chan struct{})
}

// Release lets replies go again, the held ones first.
func (d *replyDelay) Release() {
	d.mu.Lock()
	defer d.mu.Unlock()
	select {
	case <-d.held:
	default:
		close(d.held)
	}
}

func copyRequests(out, in net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			if _, werr := out.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = out.Close()
}

func (d *replyDelay) copyReplies(in, out net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := out.Read(buf)
		if n > 0 {
			d.mu.Lock()
			held := d.held
			d.mu.Unlock()
			<-held
			if _, werr := in.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = in.Close()
}

// pendingOf counts the queue's pending tasks of type typ.
func (e *asynqEnv) pendingOf(t testing.TB, typ string) int {
	t.Helper()
	tasks, err := e.inspector.ListPendingTasks(e.queue, asynq.PageSize(1000))
	require.NoError(t, err)
	n := 0
	for _, ti := range tasks {
		if ti.Type == typ {
			n++
		}
	}
	return n
}

// TestEnqueueOnceRetriedAfterALostReplyLeavesOneTask: Asynq enqueues the
// task but its reply comes after the client's read timeout, so the call
// fails; the caller's retry finds the key's task in the queue and enqueues
// no second one.
func TestEnqueueOnceRetriedAfterALostReplyLeavesOneTask(t *testing.T) {
	t.Parallel()
	e := newAsynqEnv(t)
	g := testenv.RedisGuard(t, nil)
	ctx := background(t)
	opt, ok := e.opt.(asynq.RedisClientOpt)
	require.True(t, ok, "TEST_REDIS_URL names one Redis server")
	delay := startReplyDelay(t, opt.Addr)
	opt.Addr, opt.ReadTimeout = delay.Addr(), 500*time.Millisecond
	client := asynq.NewClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	// The client has published to the queue and loaded its script: the next
	// call is the enqueue itself.
	_, err := client.EnqueueContext(ctx, asynq.NewTask("warm-up", nil), asynq.Queue(e.queue))
	require.NoError(t, err)

	task := asynq.NewTask("report", []byte("2026-12-01"))
	delay.Hold()
	// A window so long that the retry falls into the same window period.
	const window = 1000 * time.Hour
	_, err = asynqonce.EnqueueOnce(ctx, g, client, task, "report:2026-12-01", window, asynq.Queue(e.queue))
	require.ErrorContains(t, err, "i/o timeout")
	delay.Release()
	require.Equal(t, 1, e.pendingOf(t, "report"), "the task went out although its reply did not come back")

	_, err = asynqonce.EnqueueOnce(ctx, g, client, task, "report:2026-12-01", window, asynq.Queue(e.queue))
	require.ErrorIs(t, err, asynqonce.ErrAlreadyEnqueued, "the retry did not publish")
	require.ErrorIs(t, err, asynq.ErrDuplicateTask)
	require.Equal(t, 1, e.pendingOf(t, "report"), "one task for one key")
}

// TestEnqueueOnceEnqueuesANewTaskOncePerWindow: within the window the
// marker answers and nothing is enqueued; past it, the key goes out again as
// a new task with a new ID, even while the earlier task is still pending.
func TestEnqueueOnceEnqueuesANewTaskOncePerWindow(t *testing.T) {
	t.Parallel()
	e := newAsynqEnv(t)
	g := testenv.RedisGuard(t, nil)
	ctx := background(t)
	task := asynq.NewTask("digest", []byte("u-7"))
	const window = time.Second // wide enough that the second call lands within it on a loaded machine
	enqueue := func() (*asynq.TaskInfo, error) {
		return asynqonce.EnqueueOnce(ctx, g, e.client, task, "digest:u-7", window, asynq.Queue(e.queue))
	}

	first, err := enqueue()
	require.NoError(t, err)
	_, err = enqueue()
	require.ErrorIs(t, err, asynqonce.ErrAlreadyEnqueued, "within the window")
	require.NotErrorIs(t, err, asynq.ErrTaskIDConflict, "the window's marker answered, not Asynq")

	var again *asynq.TaskInfo
	var last error
	require.Eventually(t, func() bool {
		again, last = enqueue()
		return !errors.Is(last, asynqonce.ErrAlreadyEnqueued)
	}, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, last, "past the window")
	require.NotEqual(t, first.ID, again.ID, "each window's task has an ID of its own")
	require.Equal(t, 2, e.pendingOf(t, "digest"), "the earlier task does not hold the next window's ID")
}

// TestEnqueueOnceOfAPeriodicTypeRunsOncePerWindow: a task of a
// Config.PeriodicTypes type, one payload, published by EnqueueOnce again
// after its window, runs again, while a copy of it (Asynq's task ID) does
// not.
func TestEnqueueOnceOfAPeriodicTypeRunsOncePerWindow(t *testing.T) {
	t.Parallel()
	e := newAsynqEnv(t)
	var outs testenv.Outcomes
	g := testenv.RedisGuard(t, &core.Config{Observer: outs.Observe})
	var runs taskRuns
	h := asynqonce.MustMiddleware(g, &asynqonce.Config{PeriodicTypes: []string{"refresh"}})(asynq.HandlerFunc(runs.handle))
	e.start(t, e.serverConfig(2), h)
	ctx := background(t)
	task := asynq.NewTask("refresh", []byte("all"))
	const window = 200 * time.Millisecond
	enqueue := func() (*asynq.TaskInfo, error) {
		return asynqonce.EnqueueOnce(ctx, g, e.client, task, "refresh", window, asynq.Queue(e.queue))
	}

	first, err := enqueue()
	require.NoError(t, err)
	require.Eventually(t, func() bool { return outs.Get(core.Ran) == 1 }, 10*time.Second, 10*time.Millisecond, "the first window's task ran")
	var second *asynq.TaskInfo
	var last error
	require.Eventually(t, func() bool {
		second, last = enqueue()
		return !errors.Is(last, asynqonce.ErrAlreadyEnqueued)
	}, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, last)
	require.Eventually(t, func() bool { return outs.Get(core.Ran) == 2 }, 10*time.Second, 10*time.Millisecond,
		"the task published again after its window ran (duplicates: %d)", outs.Get(core.Duplicate))

	// Asynq frees the second task's ID once it has marked it done, which
	// may follow the outcome the Guard observed.
	e.waitEmpty(t, 10*time.Second)
	e.enqueue(t, task, asynq.TaskID(second.ID)) // a copy of the second task
	require.Eventually(t, func() bool { return outs.Get(core.Duplicate) == 1 }, 10*time.Second, 10*time.Millisecond)
	e.waitEmpty(t, 10*time.Second)
	ids, n := runs.snapshot()
	require.Equal(t, []string{first.ID, second.ID}, ids)
	require.Equal(t, map[string]int{first.ID: 1, second.ID: 1}, n, "each window's task ran once")
}

// TestEnqueueOnceKeepsTheCallersTaskID: a TaskID option passed to
// EnqueueOnce is kept, and a task with that ID in the queue makes a call
// under another key report that it enqueued nothing.
func TestEnqueueOnceKeepsTheCallersTaskID(t *testing.T) {
	t.Parallel()
	e := newAsynqEnv(t)
	g := testenv.RedisGuard(t, nil)
	ctx := background(t)
	task := asynq.NewTask("invoice", []byte("9"))

	info, err := asynqonce.EnqueueOnce(ctx, g, e.client, task, "invoice:9", time.Hour, asynq.Queue(e.queue), asynq.TaskID("invoice-9"))
	require.NoError(t, err)
	require.Equal(t, "invoice-9", info.ID)
	_, err = asynqonce.EnqueueOnce(ctx, g, e.client, task, "invoice:9:again", time.Hour, asynq.Queue(e.queue), asynq.TaskID("invoice-9"))
	require.ErrorIs(t, err, asynqonce.ErrAlreadyEnqueued)
	require.ErrorIs(t, err, asynq.ErrTaskIDConflict)
	require.Equal(t, 1, e.pendingOf(t, "invoice"))

	other, err := asynqonce.EnqueueOnce(ctx, g, e.client, task, "invoice:9:other", time.Hour, asynq.Queue(e.queue))
	require.NoError(t, err)
	require.NotEqual(t, info.ID, other.ID, "without a TaskID option, the ID is the key's window's")
}
