package asynqonce

import (
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jobonce/jobonce/internal/jobkey"
)

// Config configures the middleware. A nil *Config, or the zero value, gives
// the defaults. The middleware copies the Config, so later changes have no
// effect.
type Config struct {
	// Key returns the job key of a task. Copies that should cause one effect
	// must return the same key, and tasks that should each run must not. A
	// done key skips later tasks with that key for the Guard's Retention. Key
	// may read the task's type, payload and headers. An empty key is invalid
	// (core.ErrInvalidKey): the handler does not run and the task is
	// archived. Key does not apply to PeriodicTypes and UnguardedTypes.
	// Defaults to nil: DefaultKey.
	Key func(t *asynq.Task) string

	// Fingerprint returns the fingerprint of a task's payload. A key found
	// running or done with a different fingerprint is a conflict
	// (core.ErrConflict), and the task is archived. Returning "" turns the
	// check off for that task. Defaults to nil: core.Fingerprint of the
	// payload under Key, and no fingerprint under the default key or for
	// PeriodicTypes.
	Fingerprint func(t *asynq.Task) string

	// UnguardedTypes lists task types that run without a guard. They are
	// reported as core.Unguarded, and carry no idempotency key or fence.
	// Defaults to none.
	UnguardedTypes []string

	// PeriodicTypes lists task types that repeat on purpose with one
	// payload, such as an asynq.Scheduler's. Each task of these types runs
	// once, keyed by its type, queue and task ID (asynq.GetTaskID). Asynq's
	// retries of a task keep its ID, so they remain copies. A type may not
	// be in UnguardedTypes too. docs/asynq.md explains periodic tasks.
	// Defaults to none.
	PeriodicTypes []string

	// WaitRunning is how long a copy that finds its job running waits in its
	// worker slot for that copy's outcome. The wait ends 500ms before the
	// task's deadline at the latest. The Guard may refuse the wait (see
	// core.Config.WaitingShare). A copy that does not wait, or still finds
	// its job running, goes back to Asynq. A copy with no retries left waits
	// up to its deadline, whatever this is. Negative: no wait while retries
	// are left. docs/asynq.md explains waiting copies. Defaults to 5s.
	WaitRunning time.Duration

	// PollInterval is the longest pause between two checks of a copy with
	// no retries left that waits for its job. Pauses start at 10ms and
	// double up to it. Negative is invalid. Defaults to 1s.
	PollInterval time.Duration
}

const (
	defaultWaitRunning  = 5 * time.Second
	defaultPollInterval = time.Second
	firstPoll           = 10 * time.Millisecond
	// deadlineMargin is how long before the task deadline a waiting copy gives
	// up, so that it returns before Asynq cancels it.
	deadlineMargin = 500 * time.Millisecond
)

func (c *Config) withDefaults() (Config, error) {
	var cfg Config
	if c != nil {
		cfg = *c
	}
	if cfg.WaitRunning == 0 {
		cfg.WaitRunning = defaultWaitRunning
	}
	if cfg.PollInterval < 0 {
		return cfg, fmt.Errorf("jobonce: asynqonce: Config.PollInterval must not be negative, got %s", cfg.PollInterval)
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = defaultPollInterval
	}
	cfg.UnguardedTypes = append([]string(nil), cfg.UnguardedTypes...)
	cfg.PeriodicTypes = append([]string(nil), cfg.PeriodicTypes...)
	return cfg, nil
}

// DefaultKey returns the default job key of a task: its type, ":" and
// core.Fingerprint of its payload. A Config.Key may call it for the tasks
// it does not name itself.
func DefaultKey(t *asynq.Task) string {
	return jobkey.Job(source, t.Type(), t.Payload(), "", false, nil).Key
}
