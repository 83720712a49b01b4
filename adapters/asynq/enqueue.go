package asynqonce

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobonce/jobonce/core"
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
// window, using Guard.Enqueue: a marker for the key is set only if none
// exists, then the task is enqueued; if enqueueing fails, the marker is
// removed at once, so an outage never blocks the key for the whole window
// (unlike Asynq's Unique option, which also cannot take a custom key). An
// empty key means DefaultKey(task).
//
// The task is enqueued with an asynq.TaskID derived from the key, the same
// on every call ("jobonce-" and core.Fingerprint of the key; TaskInfo.ID),
// so that a retry after an ambiguous failure, such as a reply lost to a
// timeout after Asynq had enqueued the task, finds the task and enqueues no
// second one. Asynq keeps a task ID taken while its task exists in any state
// (pending, scheduled, active, retry, archived, and completed while a
// Retention option keeps it), per queue: while it does, EnqueueOnce of the
// key enqueues nothing, even past the window; once the task is gone and the
// window has passed, the key goes out again. An asynq.TaskID in opts is kept
// instead, and means the same for its own ID; a TaskID given to
// asynq.NewTask is replaced by the key's, since EnqueueOnce sees only opts.
//
// It returns ErrAlreadyEnqueued (also matching asynq.ErrDuplicateTask) when
// the key was enqueued within the window, or when a task with its task ID is
// in the queue (then matching asynq.ErrTaskIDConflict too, and the marker is
// kept for the window); an error matching core.ErrStoreUnavailable when the
// store cannot be reached (nothing is enqueued unless the Guard fails open);
// an error matching ctx.Err() when ctx ends before the store answered
// (nothing is enqueued); and the client's error unchanged when enqueueing
// fails.
func EnqueueOnce(ctx context.Context, g *core.Guard, client Enqueuer, task *asynq.Task, key string, window time.Duration, opts ...asynq.Option) (*asynq.TaskInfo, error) {
	switch {
	case g == nil:
		return nil, errors.New("jobonce: asynqonce: EnqueueOnce: Guard is nil")
	case client == nil:
		return nil, errors.New("jobonce: asynqonce: EnqueueOnce: client is nil")
	case task == nil:
		return nil, errors.New("jobonce: asynqonce: EnqueueOnce: task is nil")
	}
	if key == "" {
		key = DefaultKey(task)
	}
	opts = withTaskID(opts, key)
	var info *asynq.TaskInfo
	taken := false
	published, err := g.Enqueue(ctx, key, window, func(ctx context.Context) error {
		var err error
		info, err = client.EnqueueContext(ctx, task, opts...)
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

// withTaskID returns opts with the key's task ID after them, unless they
// hold an asynq.TaskID already.
func withTaskID(opts []asynq.Option, key string) []asynq.Option {
	for _, o := range opts {
		if o != nil && o.Type() == asynq.TaskIDOpt {
			return opts
		}
	}
	return append(opts[:len(opts):len(opts)], asynq.TaskID(taskID(key)))
}

// taskID returns the task ID of key's task.
func taskID(key string) string { return "jobonce-" + core.Fingerprint([]byte(key)) }
