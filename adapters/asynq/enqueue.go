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
// key was enqueued already. The error EnqueueOnce returns for it also
// matches asynq.ErrDuplicateTask, as Asynq's Unique option does.
var ErrAlreadyEnqueued = errors.New("jobonce: asynqonce: task already enqueued for this key")

var (
	errAlreadyEnqueued = fmt.Errorf("%w within the window (%w)", ErrAlreadyEnqueued, asynq.ErrDuplicateTask)
	errTaskIDTaken     = fmt.Errorf("%w: its task ID is taken in the queue (%w; %w)", ErrAlreadyEnqueued, asynq.ErrDuplicateTask, asynq.ErrTaskIDConflict)
)

// Enqueuer enqueues Asynq tasks. *asynq.Client satisfies it.
type Enqueuer interface {
	EnqueueContext(ctx context.Context, task *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error)
}

// EnqueueOnce enqueues task through client at most once per key within
// window, using Guard.Enqueue. An empty key means DefaultKey(task). When
// enqueueing fails, the key is released at once, so a retry can enqueue it.
//
// The task gets an asynq.TaskID that names the key and the window period.
// So a retry after a lost reply finds the task and enqueues no second one.
// An asynq.TaskID in opts is kept instead. docs/asynq.md explains these
// task IDs.
//
// It returns:
//   - ErrAlreadyEnqueued when the key was enqueued within the window, or
//     when its task ID is taken in the queue (then the error also matches
//     asynq.ErrTaskIDConflict);
//   - an error matching core.ErrRunning, with a core.RetryAfter hint, while
//     another call enqueues the key;
//   - an error matching core.ErrStoreUnavailable when the store fails
//     (core.Config.FailOpen may enqueue the task anyway);
//   - an error matching ctx.Err() when ctx ends before the store answers;
//   - the client's error, unchanged, when enqueueing fails;
//   - an error for a nil Guard, client or task, or a window under 1ms.
//
// After any error but the client's, nothing was enqueued.
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
