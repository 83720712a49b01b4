package asynqonce

import (
	"errors"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobonce/jobonce/core"
)

// IsFailure is an asynq.Config.IsFailure function: it reports false for an
// error matching core.ErrRunning (another copy of the job is running) and
// for the middleware's error when the task's context ended before its claim
// was answered (the handler did not run), and true for every other error. Asynq then retries a running copy without
// incrementing its retry count and without adding it to the queue's
// processed and failed counts; the error message is still recorded on the
// task as its last error, and asynq.Config.ErrorHandler is still called with
// it (an ErrorHandler that alerts should skip errors IsFailure reports false
// for). A copy whose retries are used up is archived by Asynq before
// IsFailure is asked, which is why the middleware waits in that case instead
// of returning.
//
// When a task's context ends, Asynq's processor itself hands the context's
// error (not the handler's) to ErrorHandler and then to its retry policy:
// a task whose Timeout or Deadline passed, or whose processing was cancelled
// through the Inspector or a cancelled BaseContext, is charged a retry, or
// archived when its retries are used up, whatever the middleware returns,
// and IsFailure reports true for that bare context error as for any other.
// Server.Shutdown does not cancel task contexts: it waits ShutdownTimeout,
// then puts the unfinished tasks back in their queues without charging a
// retry, and only then cancels their contexts; what a handler returns after
// that is discarded. A copy that never ran is thus never charged a retry by
// a shutdown.
func IsFailure(err error) bool {
	var rc *runningCopy
	if errors.As(err, &rc) {
		rc.asked.Store(true) // the server uses IsFailure (see serverCheck)
	}
	var ce *canceledError
	return !errors.Is(err, core.ErrRunning) && !errors.As(err, &ce)
}

// canceledError is the middleware's error for a task whose context ended
// before its claim was answered, or while it waited for a running copy: the
// handler did not run. It matches the context's error.
type canceledError struct{ err error }

func (e *canceledError) Error() string { return e.err.Error() }
func (e *canceledError) Unwrap() error { return e.err }

// RetryDelay is an asynq.Config.RetryDelayFunc, IsFailure's pair: it
// retries a copy that found its job running after the RetryAfter hint of
// its core.RunningError (when the running copy is expected to end), and
// every other error
// after asynq.DefaultRetryDelayFunc's delay. RetryDelayOr takes another
// policy for the other errors.
//
// Asynq stores retry times in whole seconds and moves due retries back to
// their queue every asynq.Config.DelayedTaskCheckInterval (5s by default), so
// a retry comes up to that much later than the hint.
func RetryDelay(n int, err error, t *asynq.Task) time.Duration {
	return retryDelay(n, err, t, asynq.DefaultRetryDelayFunc)
}

// RetryDelayOr returns RetryDelay with fallback in place of
// asynq.DefaultRetryDelayFunc for the errors of copies that did not find
// their job running. fallback nil means asynq.DefaultRetryDelayFunc.
func RetryDelayOr(fallback asynq.RetryDelayFunc) asynq.RetryDelayFunc {
	if fallback == nil {
		fallback = asynq.DefaultRetryDelayFunc
	}
	return func(n int, err error, t *asynq.Task) time.Duration { return retryDelay(n, err, t, fallback) }
}

func retryDelay(n int, err error, t *asynq.Task, fallback asynq.RetryDelayFunc) time.Duration {
	var rc *runningCopy
	if errors.As(err, &rc) {
		rc.delayed.Store(true) // the server uses RetryDelay (see serverCheck)
	}
	if d, ok := core.RetryAfter(err); ok {
		return d
	}
	return fallback(n, err, t)
}
