package asynqonce

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobonce/jobonce/core"
)

// ErrAlreadyEnqueued reports that EnqueueOnce found the key enqueued within
// its window already, and enqueued nothing. The error EnqueueOnce returns
// for it also matches asynq.ErrDuplicateTask, so code written for Asynq's own
// Unique option keeps working.
var ErrAlreadyEnqueued = errors.New("jobonce: asynqonce: task already enqueued for this key within the window")

var errAlreadyEnqueued = fmt.Errorf("%w (%w)", ErrAlreadyEnqueued, asynq.ErrDuplicateTask)

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
// It returns ErrAlreadyEnqueued (also matching asynq.ErrDuplicateTask) when
// the key was enqueued within the window, an error matching
// core.ErrStoreUnavailable when the store cannot be reached (nothing is
// enqueued unless the Guard fails open), an error matching ctx.Err() when
// ctx ends before the store answered (nothing is enqueued), and the client's
// error unchanged when enqueueing fails.
func EnqueueOnce(ctx context.Context, g *core.Guard, client Enqueuer, task *asynq.Task, key string, window time.Duration, opts ...asynq.Option) (*asynq.TaskInfo, error) {
	if g == nil || client == nil || task == nil {
		return nil, errors.New("jobonce: asynqonce: EnqueueOnce needs a Guard, a client and a task")
	}
	if key == "" {
		key = DefaultKey(task)
	}
	var info *asynq.TaskInfo
	published, err := g.Enqueue(ctx, key, window, func(ctx context.Context) error {
		var err error
		info, err = client.EnqueueContext(ctx, task, opts...)
		return err
	})
	if err != nil {
		return nil, err
	}
	if !published {
		return nil, errAlreadyEnqueued
	}
	return info, nil
}
