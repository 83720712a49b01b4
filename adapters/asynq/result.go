package asynqonce

import (
	"context"
	"errors"
	"fmt"

	"github.com/hibiken/asynq"
)

// ErrNoTask reports that SetResult was called with a context that did not
// come from the middleware.
var ErrNoTask = errors.New("jobonce: asynqonce: context does not come from the middleware")

type taskResultKey struct{}

// taskResult is what a handler hands back through SetResult.
type taskResult struct {
	task  *asynq.Task
	value []byte
}

// SetResult records b as the task's result: it writes b to the task's
// ResultWriter, as task.ResultWriter().Write would, and keeps it so that the
// middleware stores it with the done marker when the handler succeeds; later
// copies of the job (duplicates) then write the same bytes to their own
// ResultWriter. Call it from the handler, with the handler's context, before
// the handler returns; a later call replaces the result. It returns the
// ResultWriter's error, or ErrNoTask when ctx does not come from the
// middleware. Bytes written to the ResultWriter directly are not stored.
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
