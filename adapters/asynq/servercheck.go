package asynqonce

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hibiken/asynq"
)

// runningCopy is the middleware's error for a copy that found its job
// running: it matches core.ErrRunning and carries the claim's RetryAfter.
// IsFailure and RetryDelay mark it when Asynq asks them about it, which
// tells the middleware, at the copy's redelivery, whether the server's
// asynq.Config uses them.
type runningCopy struct {
	err     error
	retried int         // the task's retry count when it went back to Asynq
	asked   atomic.Bool // IsFailure saw it
	delayed atomic.Bool // RetryDelay saw it
}

func (e *runningCopy) Error() string { return e.err.Error() }
func (e *runningCopy) Unwrap() error { return e.err }

// maxSentBack bounds the copies a serverCheck awaits: a copy redelivered to
// another process never comes back to this one.
const maxSentBack = 1024

// serverCheck notices a server whose asynq.Config lacks IsFailure or
// RetryDelay, from the copies the middleware sent back to Asynq as running,
// when they come back (same task ID):
//
//   - IsFailure missing: the copy's retry count rose (Asynq charged it as a
//     failure) and IsFailure was not asked about it.
//   - RetryDelay missing: Asynq retried the copy, as the rise of its count or
//     IsFailure's answer shows, without asking RetryDelay its delay.
//
// A count that rose although IsFailure was asked is Asynq's recoverer at
// work (the worker's lease lapsed), and a copy that comes back with neither
// was put back by a shutdown, or by a server with its own IsFailure: no
// finding. The first finding is logged once at Warn; a copy that both
// answered ends the check too.
type serverCheck struct {
	logger  *slog.Logger
	done    atomic.Bool  // a finding, or both functions seen: nothing more to await
	pending atomic.Int32 // len(sent), read without the lock
	mu      sync.Mutex
	sent    map[string]*runningCopy // by task ID
}

// sentBack returns the error for a copy that found its job running, err,
// and awaits its redelivery when the task's ID and retry count are known.
func (c *serverCheck) sentBack(ctx context.Context, err error) error {
	rc := &runningCopy{err: err}
	if c.done.Load() {
		return rc
	}
	id, ok1 := asynq.GetTaskID(ctx)
	n, ok2 := asynq.GetRetryCount(ctx)
	if !ok1 || !ok2 {
		return rc // not from an Asynq server
	}
	rc.retried = n
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sent == nil || len(c.sent) >= maxSentBack {
		c.sent = make(map[string]*runningCopy)
	}
	c.sent[id] = rc
	c.pending.Store(int32(len(c.sent)))
	return rc
}

// redelivered looks at a task that the middleware may have sent back as
// running, and reports what its return shows of the server's configuration.
func (c *serverCheck) redelivered(ctx context.Context) {
	if c.pending.Load() == 0 || c.done.Load() {
		return
	}
	id, ok := asynq.GetTaskID(ctx)
	if !ok {
		return
	}
	c.mu.Lock()
	rc := c.sent[id]
	delete(c.sent, id)
	c.pending.Store(int32(len(c.sent)))
	c.mu.Unlock()
	if rc == nil {
		return
	}
	n, _ := asynq.GetRetryCount(ctx)
	rose, asked, delayed := n > rc.retried, rc.asked.Load(), rc.delayed.Load()
	var missing []string
	if rose && !asked {
		missing = append(missing, "IsFailure")
	}
	if !delayed && (asked != rose) { // Asynq's retry ran, and did not ask RetryDelay
		missing = append(missing, "RetryDelayFunc")
	}
	switch {
	case len(missing) > 0:
		if c.done.CompareAndSwap(false, true) {
			c.warn(ctx, missing, id)
		}
	case asked && delayed:
		c.done.Store(true)
	default:
		return
	}
	c.mu.Lock()
	c.sent = nil
	c.pending.Store(0)
	c.mu.Unlock()
}

func (c *serverCheck) warn(ctx context.Context, missing []string, taskID string) {
	verb := " is"
	if len(missing) > 1 {
		verb = " are"
	}
	c.logger.WarnContext(ctx, "jobonce: asynqonce: the Asynq server's asynq.Config."+strings.Join(missing, " and ")+verb+" not the middleware's: "+
		"jobs still run once, but a copy that finds its job running is charged a retry and counted as failed (IsFailure), "+
		"and comes back after the server's delay for failures (asynq.DefaultRetryDelayFunc: 15s or more) rather than the running claim's remaining lease (RetryDelayFunc); "+
		"set IsFailure: asynqonce.IsFailure, RetryDelayFunc: asynqonce.RetryDelay in asynq.Config",
		"missing", strings.Join(missing, ","), "task_id", taskID)
}
