package core

import (
	"errors"
	"fmt"
	"time"

	"github.com/jobonce/jobonce/core/driver"
)

var (
	// ErrRunning reports that another copy of the job holds a live claim on the key.
	// Errors returned for it are *RunningError values carrying a RetryAfter hint.
	ErrRunning = errors.New("jobonce: job is running elsewhere")

	// ErrConflict reports that a key is claimed or done with a different payload
	// fingerprint: two different jobs share one key, which is a bug upstream.
	ErrConflict = errors.New("jobonce: key reused with a different payload")

	// ErrLeaseLost reports that a claim's token is no longer held: the lease
	// expired or another owner took the key. It is the cause of a job context
	// cancelled by the heartbeat, and stores return it from Extend, Complete and
	// Release when the token does not match.
	ErrLeaseLost = driver.ErrLeaseLost

	// ErrUnreplicated reports a store write whose durability the store could
	// not confirm in time (redisstore.Config.WaitReplicas): a claim so
	// answered was released and the job did not run (Unavailable); a done
	// marker so answered is Unrecorded.
	ErrUnreplicated = driver.ErrUnreplicated

	// ErrStoreUnavailable reports that the store failed: it could not be
	// reached, or answered with an error (a Redis OOM, an unacknowledged
	// write), which the error wraps. The job did not run (fail closed) and
	// should be retried later.
	ErrStoreUnavailable = errors.New("jobonce: store unavailable")

	// ErrStoreRisk reports a store that can be reached but whose settings
	// can lose done markers, so that duplicates can run: Guard.Ready's
	// answer for a redisstore made with Config.Strict whose Redis may evict
	// keys or keeps no writes across a restart.
	ErrStoreRisk = driver.ErrStoreRisk

	// ErrInvalidKey reports an empty key.
	ErrInvalidKey = errors.New("jobonce: invalid key")

	// ErrResultTooLarge reports a job's result larger than
	// Config.MaxResultSize: the job ran and its done marker was written
	// without the result, so its duplicates get none. It is never returned
	// to the caller (the delivery is handled); it is the Err of the job's
	// Ran event.
	ErrResultTooLarge = errors.New("jobonce: result too large to store")
)

// errEmptyKey is the error of an empty key.
var errEmptyKey = fmt.Errorf("%w: key is empty", ErrInvalidKey)

// RunningError is returned when another copy of a job holds a live claim. It
// matches ErrRunning with errors.Is.
type RunningError struct {
	// RetryAfter is when a retry is likely to find the claim resolved: the
	// claim's remaining lease, bounded by the Guard's configuration.
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
