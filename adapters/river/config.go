package riveronce

import (
	"context"
	"time"

	"github.com/riverqueue/river/rivertype"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/jobkey"
)

// Config configures the middleware, Wrap and the transactional forms. A nil
// *Config gives the defaults. The Config is copied, so later changes have
// no effect.
type Config struct {
	// Key returns the key that names a job's effect. Copies of a job that
	// share a key run once. An empty key is invalid (core.ErrInvalidKey):
	// the worker does not run and the job is cancelled. Defaults to nil: the
	// args' OnceKey (Keyer), else DefaultKey.
	Key func(job *rivertype.JobRow) string

	// Fingerprint returns the fingerprint of a job's payload. A key held or
	// done with a different fingerprint is a conflict (core.ErrConflict),
	// and the job is cancelled. Return "" to turn the check off. Defaults to
	// nil: core.Fingerprint of the encoded args under a named key (Key, or a
	// Keyer's key), and none under DefaultKey's kind-and-args key.
	Fingerprint func(job *rivertype.JobRow) string

	// Unguarded reports jobs that run without the guard, such as kinds that
	// are idempotent already. They are reported as core.Unguarded, and carry
	// no idempotency key or fence. Defaults to nil: every job is guarded.
	Unguarded func(job *rivertype.JobRow) bool

	// WaitRunning is how long a copy that finds its job running waits in its
	// worker slot for that copy's outcome, before it is snoozed. The wait
	// ends 500ms before the job's deadline at the latest. The Guard may
	// refuse the wait (see core.Config.WaitingShare). WrapTx and WorkTx do
	// not wait. Negative: no wait. Defaults to 5s.
	WaitRunning time.Duration
}

const (
	defaultWaitRunning = 5 * time.Second
	// deadlineMargin is how long before its job's deadline a waiting copy
	// gives up, so that it is snoozed before River cancels it.
	deadlineMargin = 500 * time.Millisecond
)

// Keyer is implemented by job args that name their own key, such as
// "email:welcome:user-42". The key is stored with a fingerprint of the
// encoded args. Wrap calls OnceKey on the decoded args. The middleware sees
// only the encoded args, so it records OnceKey in the job's metadata
// (MetadataKey) when its client inserts the job: add the middleware to every
// client that inserts such jobs, insert-only ones too. A job inserted
// without it is keyed by DefaultKey.
type Keyer interface {
	OnceKey() string
}

// source names River in metrics and logs (Job.Source).
const source = "river"

// MetadataKey is the job metadata field in which the middleware records a
// Keyer's key at insert.
const MetadataKey = "jobonce_key"

func (c *Config) withDefaults() Config {
	var cfg Config
	if c != nil {
		cfg = *c
	}
	if cfg.WaitRunning == 0 {
		cfg.WaitRunning = defaultWaitRunning
	}
	return cfg
}

// waitUntil returns how long a copy that finds its job running waits for
// that copy's outcome (core.Job.WaitUntil): Config.WaitRunning from now,
// within ctx's deadline less deadlineMargin. Zero: no wait.
func (c *Config) waitUntil(ctx context.Context) time.Time {
	if c.WaitRunning < 0 {
		return time.Time{}
	}
	until := time.Now().Add(c.WaitRunning)
	if d, ok := ctx.Deadline(); ok && d.Add(-deadlineMargin).Before(until) {
		until = d.Add(-deadlineMargin)
	}
	return until
}

// job returns the job of row. args is the decoded args when known (Wrap),
// or nil (the middleware). unusable, when not nil, says why a periodic job
// is keyed by its job ID rather than its occurrence (see periodicKey), for
// the caller to log.
func (c *Config) job(row *rivertype.JobRow, args any) (job core.Job, unusable error) {
	if c.Unguarded != nil && c.Unguarded(row) {
		return core.Job{Kind: row.Kind, Source: source, Unguarded: true}, nil // no key: no idempotency key either
	}
	key, named := c.namedKey(row, args)
	var fp func() string
	if c.Fingerprint != nil {
		fp = func() string { return c.Fingerprint(row) }
	}
	if !named {
		if occurrence, ok, unusable := periodicKey(row); ok {
			return jobkey.Occurrence(source, row.Kind, occurrence, fp), unusable
		}
	}
	job = jobkey.Job(source, row.Kind, row.EncodedArgs, key, named, fp)
	if job.DefaultKey {
		job.KeyHint = keyHint
	}
	return job, nil
}

// keyHint is what the first skip under the default key says of it.
var keyHint = core.KeyHint{Key: "kind and args hash",
	Settings: "riveronce: set Config.Key, give the args a OnceKey (Keyer), or exempt the kind with Config.Unguarded"}

// namedKey returns the key that Config.Key, the args (Keyer) or the job's
// metadata give, in that order, and whether one did. An empty key given is
// kept, so that the job is rejected rather than guarded under another key.
func (c *Config) namedKey(row *rivertype.JobRow, args any) (string, bool) {
	if c.Key != nil {
		return c.Key(row), true
	}
	if k, ok := args.(Keyer); ok {
		return k.OnceKey(), true
	}
	return jobkey.RiverMetadataKey(row.Metadata)
}
