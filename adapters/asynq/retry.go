package asynqonce

import (
	"errors"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobonce/jobonce/core"
)

// IsFailure is an asynq.Config.IsFailure function: it reports false for an
// error matching core.ErrRunning (another copy of the job is running), and
// true for every other error. Asynq then retries a running copy without
// incrementing its retry count and without adding it to the queue's
// processed and failed counts; the error message is still recorded on the
// task as its last error, and asynq.Config.ErrorHandler is still called with
// it (an ErrorHandler that alerts should skip errors IsFailure reports false
// for). A copy whose retries are used up is archived by Asynq before
// IsFailure is asked, which is why the middleware waits in that case instead
// of returning.
func IsFailure(err error) bool {
	return !errors.Is(err, core.ErrRunning)
}

// RetryDelay returns an asynq.Config.RetryDelayFunc that retries a copy that
// found its job running after the claim's remaining lease (the RetryAfter
// hint of core.RunningError), and asks fallback for every other error.
// fallback nil means asynq.DefaultRetryDelayFunc.
//
// Asynq stores retry times in whole seconds and moves due retries back to
// their queue every asynq.Config.DelayedTaskCheckInterval (5s by default), so
// a retry comes up to that much later than the hint.
func RetryDelay(fallback asynq.RetryDelayFunc) asynq.RetryDelayFunc {
	if fallback == nil {
		fallback = asynq.DefaultRetryDelayFunc
	}
	return func(n int, err error, t *asynq.Task) time.Duration {
		if d, ok := core.RetryAfter(err); ok {
			return d
		}
		return fallback(n, err, t)
	}
}
