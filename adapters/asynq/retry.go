package asynqonce

import (
	"errors"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobonce/jobonce/core"
)

// IsFailure is an asynq.Config.IsFailure function. It reports false for a
// copy that found its job running (core.ErrRunning), and for a task whose
// context ended before it ran. It reports true for every other error. Asynq
// retries a task that IsFailure reports false for without charging it a
// retry or counting a failure. Asynq still passes such errors to
// asynq.Config.ErrorHandler: an ErrorHandler that alerts should skip them.
// docs/asynq.md explains how Asynq treats each error.
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

// RetryDelay is an asynq.Config.RetryDelayFunc, IsFailure's pair. An error
// that carries a core.RunningError is retried after its RetryAfter hint,
// when the running copy is expected to end. Every other error gets
// asynq.DefaultRetryDelayFunc's delay. RetryDelayOr takes another policy
// for those.
func RetryDelay(n int, err error, t *asynq.Task) time.Duration {
	return retryDelay(n, err, t, asynq.DefaultRetryDelayFunc)
}

// RetryDelayOr returns RetryDelay with fallback in place of
// asynq.DefaultRetryDelayFunc. A nil fallback means
// asynq.DefaultRetryDelayFunc.
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
