package asynqonce

import (
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jobonce/jobonce/internal/jobkey"
)

// Config configures the middleware. The zero value, or a nil *Config, gives
// the defaults. The middleware copies the Config; later changes to it have
// no effect.
type Config struct {
	// Key returns the job key of a task: copies that should cause one effect
	// must return the same key, and tasks that should each run must not (a
	// done key skips later tasks for the Guard's Retention; periodic tasks
	// need a key naming the occurrence). It may read the task's type, payload
	// and headers. An empty key is invalid (core.ErrInvalidKey): the handler
	// does not run and the task is archived (asynq.SkipRetry), as in every
	// adapter; list types that should run unguarded in UnguardedTypes.
	// Defaults to nil: the task type, ":" and core.Fingerprint of the payload
	// (see DefaultKey). Tasks of PeriodicTypes and UnguardedTypes are keyed
	// by those lists instead.
	Key func(t *asynq.Task) string

	// Fingerprint returns the fingerprint of a task's payload: a key found
	// running or done with a different fingerprint is a conflict (two
	// different jobs share a key), which is archived at once through
	// asynq.SkipRetry. Returning "" disables the check for that task.
	// Defaults to nil: core.Fingerprint of the payload when Key is set; with
	// the default key, which holds that fingerprint already, and for
	// PeriodicTypes, whose key names the task, none is stored.
	Fingerprint func(t *asynq.Task) string

	// UnguardedTypes lists task types that run without a guard, reported to
	// the Guard's Observer, log and metrics as core.Unguarded under their
	// type; they have no key, so no idempotency key or fence either.
	// Defaults to none.
	UnguardedTypes []string

	// PeriodicTypes lists task types that repeat on purpose with the same
	// payload, such as those an asynq.Scheduler enqueues, or EnqueueOnce
	// once per window: each task of these types runs once, keyed by its
	// type, queue and task ID (asynq.GetTaskID), instead of its payload. The
	// Scheduler enqueues every occurrence as a new task with a new ID, and
	// marks it in no way a worker can see, hence this list; EnqueueOnce gives
	// each window's task an ID of its own; Asynq's retries and recoveries of
	// a task keep its ID, so they remain copies. Do not register or enqueue
	// such tasks with an asynq.TaskID option, which gives every occurrence
	// the same ID. Two
	// Schedulers running one entry enqueue each occurrence twice, as two
	// tasks that both run: register it with asynq.Unique to enqueue one.
	// Config.Key does not apply to these types; UnguardedTypes comes first.
	// Defaults to none.
	PeriodicTypes []string

	// WaitRunning is how long a copy that finds its job running elsewhere
	// waits in its worker slot for that copy's outcome, within its task's
	// deadline (less 500ms), before it goes back to Asynq to be retried
	// later: the Guard's completion signal wakes it the moment the running
	// copy's done marker is written (it is then a duplicate) or its claim
	// released (it runs). Waiting saves the trip through Asynq's retry set,
	// seconds at best, and holds the worker slot meanwhile, so the Guard
	// lets one copy of a key wait, and no more copies than its
	// core.Config.WaitingShare of the tasks in progress; the others go back
	// at once, retried after the RetryAfter hint, as does a copy of a kind
	// that this Guard has seen run longer than the running copy has left
	// within the wait (see core.Job.WaitUntil). A copy with no retries left
	// always waits, holding its slot up to its task deadline, whatever this
	// is and whatever the Guard admits (see docs/asynq.md). Negative: no
	// wait while retries are left. Defaults to 5s.
	WaitRunning time.Duration

	// PollInterval is the longest pause between two checks of a copy with
	// no retries left that still waits when the Guard comes back to it
	// before its deadline (its store failing, or its running copy expected
	// to run past the deadline). Pauses start at 10ms and double up to it.
	// Defaults to 1s.
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

// DefaultKey is the default job key of a task: its type, ":" and
// core.Fingerprint of its payload, so copies of one task share a key and
// tasks with different payloads do not. A Config.Key may call it for the
// tasks it does not name itself.
func DefaultKey(t *asynq.Task) string {
	return jobkey.Job(source, t.Type(), t.Payload(), "", false, nil).Key
}
