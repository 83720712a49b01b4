package asynqonce

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobonce/jobonce/core"
)

// runningCopy is the middleware's error for a copy that found its job
// running: it matches core.ErrRunning and carries the claim's RetryAfter.
// IsFailure and RetryDelay mark it when Asynq asks them about it, which
// tells the middleware, at the copy's redelivery, whether the server's
// asynq.Config uses them.
type runningCopy struct {
	err     error
	retried int           // the task's retry count when it went back to Asynq
	sentAt  time.Time     // when it went back
	hint    time.Duration // the claim's remaining lease (core.RetryAfter)
	asked   atomic.Bool   // IsFailure saw it
	delayed atomic.Bool   // RetryDelay saw it
}

func (e *runningCopy) Error() string { return e.err.Error() }
func (e *runningCopy) Unwrap() error { return e.err }

// maxSentBack bounds the copies a serverCheck awaits: a copy redelivered to
// another process never comes back to this one.
const maxSentBack = 1024

// lateMargin is how much later than its hint a copy retried by a
// RetryDelayFunc other than RetryDelay may come back and still count as on
// time: Asynq's retry times are whole seconds, its forwarder moves due
// retries every DelayedTaskCheckInterval (5s by default), and the copy may
// wait in its queue. asynq.DefaultRetryDelayFunc retries after 15s or more.
const lateMargin = 7 * time.Second

// serverCheck notices a server whose asynq.Config lacks IsFailure or
// RetryDelay, from the copies the middleware sent back to Asynq as running,
// when they come back (same task ID):
//
//   - IsFailure missing: the copy's retry count rose (Asynq charged it as a
//     failure) and IsFailure was not asked about it.
//   - RetryDelay missing: Asynq retried the copy, as the rise of its count or
//     IsFailure's answer shows, without asking RetryDelay its delay, and the
//     copy came back more than lateMargin after the claim's remaining lease
//     (a RetryDelayFunc of the user's own that returns core.RetryAfter's
//     hint brings it back on time).
//
// A count that rose although IsFailure was asked is Asynq's recoverer at
// work (the worker's lease lapsed), and a copy that comes back with neither
// was put back by a shutdown, or by a server with its own IsFailure: no
// finding. The first finding is logged once at Warn; a copy that both
// answered (or came back on time after IsFailure's answer) ends the check
// too.
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
	rc := &runningCopy{err: err, sentAt: time.Now()}
	rc.hint, _ = core.RetryAfter(err)
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
	f := finding{}
	if rose && !asked {
		f.isFailure = true
	}
	if !delayed && asked != rose { // Asynq's retry ran, and did not ask RetryDelay
		if back := time.Since(rc.sentAt); back > rc.hint+lateMargin {
			f.late, f.back, f.hint = true, back, rc.hint
		} else {
			delayed = true // a RetryDelayFunc of the user's own, as good
		}
	}
	switch {
	case f.isFailure || f.late:
		if c.done.CompareAndSwap(false, true) {
			c.logger.WarnContext(ctx, f.message(), "missing", strings.Join(f.missing(), ","), "task_id", id)
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

// finding is what a returning copy showed of the server's asynq.Config.
type finding struct {
	isFailure bool          // IsFailure is not the middleware's
	late      bool          // the copy came back late: RetryDelayFunc is not
	back      time.Duration // how long after it was sent back it came back
	hint      time.Duration // the claim's remaining lease it was sent back with
}

// missing names the asynq.Config fields the finding shows missing.
func (f finding) missing() []string {
	var m []string
	if f.isFailure {
		m = append(m, "IsFailure")
	}
	if f.late {
		m = append(m, "RetryDelayFunc")
	}
	return m
}

// message is the warning's text, built from what is missing.
func (f finding) message() string {
	missing := f.missing()
	verb := " is"
	if len(missing) > 1 {
		verb = " are"
	}
	var effects, set []string
	if f.isFailure {
		effects = append(effects, "a copy that finds its job running is charged a retry and counted as failed")
		set = append(set, "IsFailure: asynqonce.IsFailure")
	}
	if f.late {
		effects = append(effects, fmt.Sprintf("a copy sent back as running came back after %s, not after the running claim's remaining lease (%s): "+
			"the server's delay for failures applies (asynq.DefaultRetryDelayFunc: 15s or more; a busy queue delays copies too)",
			f.back.Round(time.Millisecond), f.hint))
		set = append(set, "RetryDelayFunc: asynqonce.RetryDelay")
	}
	return "jobonce: asynqonce: the Asynq server's asynq.Config." + strings.Join(missing, " and ") + verb + " not the middleware's: " +
		"jobs still run once, but " + strings.Join(effects, "; and ") + "; set " + strings.Join(set, ", ") + " in asynq.Config"
}
