package asynqonce

import (
	"context"
	"errors"
	"fmt"

	"github.com/hibiken/asynq"
)

// ErrNoTask reports a SetResult call whose context does not come from the
// middleware.
var ErrNoTask = errors.New("jobonce: asynqonce: context does not come from the middleware")

type taskResultKey struct{}

// taskResult is what a handler hands back through SetResult.
type taskResult struct {
	task  *asynq.Task
	value []byte
}

// SetResult records b as the task's result. It writes b to the task's
// ResultWriter, and the middleware stores it with the done marker when the
// handler succeeds. Duplicates then write the same bytes to their own
// ResultWriter. Call it from the handler, with the handler's context. A
// later call replaces the result. Bytes written to the ResultWriter
// directly are not stored. It returns the ResultWriter's error, or
// ErrNoTask when ctx does not come from the middleware.
func SetResult(ctx context.Context, b []byte) error {
	rs, ok := ctx.Value(taskResultKey{}).(*taskResult)
	if !ok {
		return ErrNoTask
	}
	rs.value = append([]byte(nil), b...)
	if w := rs.task.ResultWriter(); w != nil {
		if _, err := w.Write(b); err != nil {
			return fmt.Errorf("jobonce: asynqonce: write the task result: %w", err)
		}
	}
	return nil
}
