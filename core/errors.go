package core

import (
	"errors"
	"fmt"
	"time"

	"github.com/jobonce/jobonce/core/driver"
)

var (
	// ErrRunning reports that another copy of the job holds a live claim.
	ErrRunning = errors.New("jobonce: job is running elsewhere")

	// ErrConflict reports a key held or done with another fingerprint.
	ErrConflict = errors.New("jobonce: key reused with a different payload")

	// ErrLeaseLost reports a claim that no longer holds its key.
	ErrLeaseLost = driver.ErrLeaseLost

	// ErrUnreplicated reports a write the store could not confirm as durable.
	ErrUnreplicated = driver.ErrUnreplicated

	// ErrStoreUnavailable reports a store failure, which the error wraps.
	ErrStoreUnavailable = errors.New("jobonce: store unavailable")

	// ErrStoreRisk reports a store whose settings can lose done markers.
	ErrStoreRisk = driver.ErrStoreRisk

	// ErrInvalidKey reports an empty key.
	ErrInvalidKey = errors.New("jobonce: invalid key")

	// ErrResultTooLarge is the Err of a Ran event whose result was not stored.
	ErrResultTooLarge = errors.New("jobonce: result too large to store")
)

// errEmptyKey is the error of an empty key.
var errEmptyKey = fmt.Errorf("%w: key is empty", ErrInvalidKey)

// RunningError reports that another copy of a job holds a live claim. It
// matches ErrRunning.
type RunningError struct {
	// RetryAfter is how long to wait before a retry, within
	// Config.MinRetryAfter and Config.MaxRetryAfter.
	RetryAfter time.Duration
}

// Error implements error.
func (e *RunningError) Error() string {
	return fmt.Sprintf("%s (retry after %s)", ErrRunning.Error(), e.RetryAfter)
}

// Is reports whether target is ErrRunning.
func (e *RunningError) Is(target error) bool { return target == ErrRunning }

// RetryAfter returns the RetryAfter hint of a *RunningError in err's chain.
func RetryAfter(err error) (time.Duration, bool) {
	var re *RunningError
	if errors.As(err, &re) {
		return re.RetryAfter, true
	}
	return 0, false
}
