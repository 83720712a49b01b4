package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime"
	"time"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/internal/groupcommit"
	"github.com/jobonce/jobonce/internal/heartbeat"
	"github.com/jobonce/jobonce/internal/signal"
	"github.com/jobonce/jobonce/internal/storecall"
)

// Guard runs each job at most once at a time and, once it succeeded, never
// again within the retention window. It is safe for concurrent use.
type Guard struct {
	// A call goes one way: the Guard makes a Claim (claim.go), the Claim
	// runs its job and writes its done marker (work.go) through the store
	// (internal/storecall), and reports its outcome (observe.go).

	store *storecall.Store // calls the store; store.Driver is the store itself
	cfg   Config
	obs   *observer // reports outcomes: Config.Observer, the log, the metrics

	// Group commit of concurrent claims and done markers on a BatchStore;
	// nil when off.
	groupCommit *groupcommit.Group[groupcommit.Op, driver.ClaimReply]

	// The completion signal of a store that notifies (driver.Notifier);
	// nil otherwise, and copies that wait for a running claim poll.
	signal *signal.Signal

	heartbeat *heartbeat.Config // nil when Config.DisableHeartbeat
	waiting   *waiting          // the copies waiting for a running copy
}

// Job names one delivery of a job for Guard.Run and Guard.Claim.
type Job struct {
	// Key names the job's effect, such as "email:welcome:user-42". Copies
	// that should cause one effect share a key. It must not be empty.
	Key string
	// Fingerprint identifies the payload, such as Fingerprint(body). When set,
	// a key held or done with a different fingerprint is a Conflict. Empty
	// disables the check. One longer than 64 bytes is stored as its SHA-256.
	Fingerprint string
	// Kind names the kind of job for metrics and logs (the jobonce.kind
	// attribute): the adapters set it to the Asynq task type, the SQS queue
	// name or the River kind. It must come from a small fixed set: after 100
	// distinct Source and Kind pairs, a Guard counts further ones as "other".
	Kind string
	// Source names what delivered the job (the jobonce.source attribute):
	// "asynq", "sqs" or "river" from the adapters, empty from your own code.
	Source string
	// Unguarded runs the job without a claim, as a consumer's configuration
	// exempts some jobs (an adapter's skipped task types or kinds): the job
	// always runs, and is reported as Unguarded with a nil error, logged at
	// Debug; Key only names it in the report and may be empty.
	Unguarded bool
	// DefaultKey reports that an adapter made Key by its default from the
	// kind and the payload alone (kind, ":" and Fingerprint of the payload),
	// which cannot tell a copy from the same work sent again on purpose. The
	// first Duplicate of each Source and Kind under such a key is logged at
	// Info, naming the setting that keys such work by occurrence; later ones
	// at Debug, as usual. The adapters leave it false for a key you named and
	// for a default that names the delivery or occurrence (a FIFO
	// MessageId, a periodic occurrence). Defaults to false.
	DefaultKey bool
	// KeyHint is what that Info record says of a DefaultKey: what the key
	// is made of and the settings that key work by occurrence, in the
	// words of the adapter that made it. Defaults to the zero KeyHint.
	KeyHint KeyHint

	// WaitUntil, when set, lets a copy that finds its job running wait, in
	// its caller, for the running copy's outcome, until WaitUntil at most:
	// woken the moment that copy's done marker is written (the copy is then
	// a Duplicate) or its claim released (the copy claims the key and runs
	// the job), by the store's completion signal (driver.Notifier;
	// polling, on a store without one), and otherwise reporting Running
	// when the wait ends. The copy does not wait, and reports Running at
	// once, when another copy of the key waits in this Guard, when
	// Config.WaitingShare of the calls in progress wait already, or when the
	// running copy is not expected to finish by WaitUntil: when its claim's
	// age (from the claim's fence) plus the 90th percentile of the last 32
	// runs of the job's Source and Kind in this Guard (once it has seen 5)
	// reaches past WaitUntil. A wait ends with the caller's context too:
	// Canceled. Set it before the deadline of the delivery (a task's
	// deadline, a message's visibility), with room for the answer. Defaults
	// to zero: no wait.
	WaitUntil time.Time
	// HoldsWorker reports that the caller keeps its worker for this delivery
	// whether or not the copy waits: an Asynq task with no retries left, or a
	// Watermill message that a nack would bring straight back. Such a copy
	// may wait past the Guard's limits on waiting copies (one per key,
	// Config.WaitingShare), and counts towards them. Defaults to false.
	HoldsWorker bool
}

// KeyHint names, in an adapter's words, what its default key is made of
// and the settings that key work which repeats on purpose by occurrence,
// for the Info record of a kind's first skip under that key
// (Job.DefaultKey).
type KeyHint struct {
	// Key says what the default key is made of, such as "task type and
	// payload hash". Defaults to "kind and payload hash".
	Key string
	// Settings names the settings that key such work by occurrence, such
	// as "asynqonce: set Config.Key". Defaults to "give the job a Key that
	// names each occurrence".
	Settings string
}

// RunFunc is a job's function for Guard.Run: the result it returns is stored
// with the done marker and handed to later duplicates.
type RunFunc func(ctx context.Context) (result []byte, err error)

// Result is what Guard.Run reports for one delivery.
type Result struct {
	// Outcome says what happened.
	Outcome Outcome
	// Value is the job's result: the one fn returned when it ran, or the one
	// stored by the copy that ran, for a Duplicate.
	Value []byte
}

// Outcome says what Guard.Do did with one delivery of a job.
type Outcome uint8

const (
	// Ran: this copy claimed the key, the function succeeded, and the done
	// marker was recorded.
	Ran Outcome = iota + 1
	// Duplicate: the key was already done; the function did not run.
	Duplicate
	// Running: another copy holds a live claim; the function did not run and
	// the error is a *RunningError.
	Running
	// Conflict: the key is held or done with a different payload fingerprint;
	// the function did not run and the error matches ErrConflict.
	Conflict
	// Failed: the function returned an error or panicked; the claim was
	// released so a retry can run at once.
	Failed
	// LeaseLost: the function succeeded, but the claim's token was gone when
	// the done marker was written (the lease expired; another copy may have run).
	LeaseLost
	// Unrecorded: the function succeeded, but the store failed to record the
	// done marker after retries. The job counts as done for the framework.
	Unrecorded
	// Unguarded: the store was unreachable and FailOpen ran the function without
	// a claim.
	Unguarded
	// Unavailable: the store was unreachable and the function did not run (fail
	// closed); the error matches ErrStoreUnavailable.
	Unavailable
	// Rejected: the input was invalid (for example an empty key); nothing ran.
	Rejected
	// Canceled: the caller's context ended before the key's state was known
	// (or before the job could start, releasing the claim); nothing ran, and
	// the error matches the context's error (context.Canceled or
	// context.DeadlineExceeded). It is not a store outage: FailOpen never runs
	// such a job, and it is logged at Debug.
	Canceled
)

var outcomeNames = [...]string{
	0:           "unknown",
	Ran:         "ran",
	Duplicate:   "duplicate",
	Running:     "running",
	Conflict:    "conflict",
	Failed:      "failed",
	LeaseLost:   "lease_lost",
	Unrecorded:  "unrecorded",
	Unguarded:   "unguarded",
	Unavailable: "unavailable",
	Rejected:    "rejected",
	Canceled:    "canceled",
}

// String returns the outcome's name in snake case, as used in logs and metrics.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// executed reports whether the job's function ran for this outcome.
func (o Outcome) executed() bool {
	switch o {
	case Ran, Failed, LeaseLost, Unrecorded, Unguarded:
		return true
	}
	return false
}

// New returns a Guard that keeps its claims in store. cfg may be nil for the
// defaults; an invalid field gives an error naming it.
func New(store driver.Store, cfg *Config) (*Guard, error) {
	if store == nil {
		return nil, errors.New("jobonce: core: New: store is nil")
	}
	if v := reflect.ValueOf(store); v.Kind() == reflect.Pointer && v.IsNil() {
		// What a store's constructor returns beside its error.
		return nil, fmt.Errorf("jobonce: core: New: store is a nil %T: check the error its constructor returned", store)
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if l, ok := store.(driver.ResultLimiter); ok && c.MaxResultSize > l.MaxResultSize() {
		if cfg != nil && cfg.MaxResultSize != 0 {
			return nil, fmt.Errorf("jobonce: core: Config.MaxResultSize %d is larger than the %d bytes a done marker of %T holds", c.MaxResultSize, l.MaxResultSize(), store)
		}
		c.MaxResultSize = l.MaxResultSize() // the default, lowered to what the store holds
	}
	obs, err := newObserver(&c)
	if err != nil {
		return nil, fmt.Errorf("jobonce: core: Config.MeterProvider: %w", err)
	}
	g := &Guard{store: storecall.New(store, c.StoreTimeout, c.Logger), cfg: c, obs: obs, waiting: newWaiting(c.WaitingShare)}
	if n := g.store.Notifier; n != nil {
		g.signal = signal.New(n, c.StoreTimeout, c.Logger)
		closeWhenUnreachable(g)
	}
	if g.store.Batcher != nil && !c.DisableGroupCommit {
		g.groupCommit = groupcommit.ForStore(g.store.Batcher, c.StoreTimeout)
	}
	if !c.DisableHeartbeat {
		g.heartbeat = &heartbeat.Config{Extend: g.store.Extend, Lease: c.Lease, Timeout: c.StoreTimeout}
	}
	return g, nil
}

// MaxResultSize returns the largest result the Guard stores with a done
// marker (Config.MaxResultSize), for an adapter that stores a result of its
// own and must tell its duplicates when it could not.
func (g *Guard) MaxResultSize() int { return g.cfg.MaxResultSize }

// Logger returns the Guard's logger (Config.Logger), for code that reports
// alongside the Guard, such as an adapter's warnings.
func (g *Guard) Logger() *slog.Logger { return g.cfg.Logger }

// Do runs fn at most once at a time for key and, after fn succeeded, never
// again while the done marker is retained.
//
//   - The key was free: fn runs with a context that is cancelled with cause
//     ErrLeaseLost if the claim is lost. fn's error (or panic) releases the
//     claim and comes back unchanged, with outcome Failed. Success records
//     the done marker: Ran (or LeaseLost/Unrecorded when it could not be
//     recorded; the error is nil all the same, since the effect happened).
//   - Another copy runs: outcome Running and a *RunningError (ErrRunning).
//   - Already done: outcome Duplicate and a nil error.
//   - The store is unreachable: outcome Unavailable and an error matching
//     ErrStoreUnavailable, or with FailOpen, fn runs unguarded (Unguarded).
//   - An empty key: outcome Rejected and an error matching ErrInvalidKey.
func (g *Guard) Do(ctx context.Context, key string, fn func(context.Context) error) (Outcome, error) {
	if fn == nil {
		res, err := g.run(ctx, Job{Key: key}, nil, "Guard.Do")
		return res.Outcome, err
	}
	res, err := g.run(ctx, Job{Key: key}, func(ctx context.Context) ([]byte, error) {
		return nil, fn(ctx)
	}, "Guard.Do")
	return res.Outcome, err
}

// Run is Do with a payload fingerprint and a stored result. A Duplicate's
// Result.Value is the result stored by the copy that ran. Different payloads
// under one key give Conflict and an error matching ErrConflict. A nil
// error means the delivery is handled (acknowledge it); any other outcome
// comes with an error.
func (g *Guard) Run(ctx context.Context, job Job, fn RunFunc) (Result, error) {
	return g.run(ctx, job, fn, "Guard.Run")
}

// run is Run; caller names the exported function, in errors.
func (g *Guard) run(ctx context.Context, job Job, fn RunFunc, caller string) (Result, error) {
	var c Claim
	if fn == nil {
		c = Claim{g: g, job: job} // rejected below without claiming
		return c.run(ctx, nil, caller)
	}
	g.claimOne(ctx, &c, job)
	return c.run(ctx, fn, caller)
}

// closeWhenUnreachable closes g's Listener once g is unreachable, so that a
// Guard dropped without Close keeps no connection and no goroutine past a
// garbage collection. No copy waits then: each holds its Guard.
func closeWhenUnreachable(g *Guard) {
	runtime.AddCleanup(g, func(s *signal.Signal) { go s.Close() }, g.signal)
}

// Close closes the Guard's completion signal: the Listener that copies
// waiting for a running claim share (Job.WaitUntil), which otherwise stays
// open for a minute after the last of them stopped waiting, or until the
// Guard is garbage collected. It closes it at once when no copy waits, and
// otherwise as the last one leaves; a later wait opens it again. It returns
// the error of the Listener it closed (driver.Listener.Close). A Guard on a
// store that does not notify has nothing to close.
func (g *Guard) Close() error {
	return g.signal.Close()
}
