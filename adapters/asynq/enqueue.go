package asynqonce

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/nilcheck"
)

// ErrAlreadyEnqueued reports that EnqueueOnce enqueued nothing because the
// key was enqueued already: within its window (the Guard's marker), or by a
// task still in its queue under the key's task ID (asynq.ErrTaskIDConflict).
// The error EnqueueOnce returns for it also matches asynq.ErrDuplicateTask,
// so code written for Asynq's own Unique option keeps working.
var ErrAlreadyEnqueued = errors.New("jobonce: asynqonce: task already enqueued for this key")

var (
	errAlreadyEnqueued = fmt.Errorf("%w within the window (%w)", ErrAlreadyEnqueued, asynq.ErrDuplicateTask)
	errTaskIDTaken     = fmt.Errorf("%w: its task ID is taken in the queue (%w; %w)", ErrAlreadyEnqueued, asynq.ErrDuplicateTask, asynq.ErrTaskIDConflict)
)

// Enqueuer enqueues Asynq tasks; *asynq.Client satisfies it.
type Enqueuer interface {
	EnqueueContext(ctx context.Context, task *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error)
}

// EnqueueOnce enqueues task through client at most once per key within
// window, using Guard.Enqueue: the key is claimed while the task is
// enqueued and marked for the window once it is; if enqueueing fails, the
// claim is released at once, so an outage never blocks the key for the
// whole window (unlike Asynq's Unique option, which also cannot take a
// custom key). An empty key means DefaultKey(task).
//
// The task is enqueued with an asynq.TaskID that names the key's window:
// "jobonce-", core.Fingerprint of the key, "-" and the number of whole
// windows from the Unix epoch to the publish, by this process's clock
// (TaskInfo.ID). A publish after the window has passed is thus a new task
// with a new ID, which runs under Config.PeriodicTypes (keyed by task ID),
// while a retry after an ambiguous failure, such as a reply lost to a
// timeout after Asynq had enqueued the task, carries the same ID and finds
// the task, enqueuing no second one: unless the retry falls into the next
// window period (a chance of its delay over window), when it is a new task.
// Asynq keeps a task ID taken while its task exists in any state (pending,
// scheduled, active, retry, archived, and completed while a Retention
// option keeps it), per queue. An asynq.TaskID in opts is kept instead, the
// same in every window: while its task exists, EnqueueOnce enqueues nothing,
// even past the window, and under Config.PeriodicTypes every task it
// enqueues is one occurrence. A TaskID given to asynq.NewTask is replaced
// by the key's, since EnqueueOnce sees only opts.
//
// It returns ErrAlreadyEnqueued (also matching asynq.ErrDuplicateTask) when
// the key was enqueued within the window, or when a task with its task ID is
// in the queue (then matching asynq.ErrTaskIDConflict too, and the marker is
// kept for the window); an error matching core.ErrRunning, with a
// core.RetryAfter hint, while another call is enqueueing the key (nothing is
// enqueued: try again after the hint); an error matching
// core.ErrStoreUnavailable when the store cannot be reached (nothing is
// enqueued unless the Guard fails open);
// an error matching ctx.Err() when ctx ends before the store answered
// (nothing is enqueued); and the client's error unchanged when enqueueing
// fails.
func EnqueueOnce(ctx context.Context, g *core.Guard, client Enqueuer, task *asynq.Task, key string, window time.Duration, opts ...asynq.Option) (*asynq.TaskInfo, error) {
	switch {
	case g == nil:
		return nil, errors.New("jobonce: asynqonce: EnqueueOnce: Guard is nil")
	case nilcheck.IsNil(client):
		return nil, errors.New("jobonce: asynqonce: EnqueueOnce: client is nil")
	case task == nil:
		return nil, errors.New("jobonce: asynqonce: EnqueueOnce: task is nil")
	}
	if key == "" {
		key = DefaultKey(task)
	}
	var info *asynq.TaskInfo
	taken := false
	published, err := g.Enqueue(ctx, key, window, func(ctx context.Context) error {
		var err error
		info, err = client.EnqueueContext(ctx, task, withTaskID(opts, key, window, time.Now())...)
		if errors.Is(err, asynq.ErrTaskIDConflict) {
			taken = true // the key's task is in the queue: keep the marker
			return nil
		}
		return err
	})
	switch {
	case err != nil:
		return nil, err
	case taken:
		return nil, errTaskIDTaken
	case !published:
		return nil, errAlreadyEnqueued
	}
	return info, nil
}

// withTaskID returns opts with the task ID of key's window at now after
// them, unless they hold an asynq.TaskID already.
func withTaskID(opts []asynq.Option, key string, window time.Duration, now time.Time) []asynq.Option {
	for _, o := range opts {
		if o != nil && o.Type() == asynq.TaskIDOpt {
			return opts
		}
	}
	return append(opts[:len(opts):len(opts)], asynq.TaskID(taskID(key, window, now)))
}

// taskID returns the task ID of key's task published at now: the key's
// fingerprint and the window period now falls in. window is at least 1ms
// (Guard.Enqueue checks it before publishing).
func taskID(key string, window time.Duration, now time.Time) string {
	return "jobonce-" + core.Fingerprint([]byte(key)) + "-" + strconv.FormatInt(now.UnixNano()/int64(window), 10)
}
