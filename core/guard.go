package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime"
	"sync"
	"time"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/internal/groupcommit"
	"github.com/jobonce/jobonce/internal/heartbeat"
	"github.com/jobonce/jobonce/internal/signal"
	"github.com/jobonce/jobonce/internal/storecall"
)

// Guard runs each job at most once at a time and, once it succeeded, never
// again within Config.Retention. It is safe for concurrent use.
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

	// failingOpen holds the keys whose jobs run unguarded under FailOpen,
	// one copy of a key at a time.
	failingOpen sync.Map
}

// Job names one delivery of a job for Guard.Run and Guard.Claim.
type Job struct {
	// Key names the job's effect, such as "email:welcome:user-42". It must
	// not be empty.
	Key string
	// Fingerprint identifies the payload, such as Fingerprint(body). Another
	// fingerprint under the key is a Conflict. Defaults to "": no check.
	Fingerprint string
	// Kind names the kind of job in metrics, from a small fixed set.
	// Defaults to "".
	Kind string
	// Source names what delivered the job, such as "asynq". Defaults to "".
	Source string
	// Unguarded runs the job without a claim; Key may be empty. Defaults to
	// false.
	Unguarded bool
	// DefaultKey reports that an adapter derived Key from the kind and
	// payload alone (docs/semantics.md). Defaults to false.
	DefaultKey bool
	// KeyHint says how an adapter made its default key. Defaults to zero.
	KeyHint KeyHint

	// WaitUntil lets a copy that finds its job running wait for that copy,
	// until WaitUntil at most (docs/semantics.md). Defaults to zero: no wait.
	WaitUntil time.Time
	// HoldsWorker lets the copy wait past the Guard's limits on waiting
	// copies, as its caller keeps its worker anyway. Defaults to false.
	HoldsWorker bool
}

// KeyHint names, in an adapter's words, what its default key is made of
// and how to key work that repeats on purpose (see Job.DefaultKey).
type KeyHint struct {
	// Key says what the default key is made of, such as "task type and
	// payload hash". Defaults to "kind and payload hash".
	Key string
	// Settings names the settings that key work by occurrence. Defaults to
	// "give the job a Key that names each occurrence".
	Settings string
}

// RunFunc is a job's function for Guard.Run. Its result is stored with the
// done marker and handed to later duplicates.
type RunFunc func(ctx context.Context) (result []byte, err error)

// Result is what Guard.Run reports for one delivery.
type Result struct {
	// Outcome says what happened.
	Outcome Outcome
	// Value is fn's result, or for a Duplicate the stored one.
	Value []byte
}

// Outcome says what a Guard did with one delivery. docs/semantics.md
// states what each outcome guarantees.
type Outcome uint8

const (
	// Ran: the function succeeded under the claim; its marker is written.
	Ran Outcome = iota + 1
	// Duplicate: the key was done; the function did not run.
	Duplicate
	// Running: another copy holds a live claim; the function did not run.
	Running
	// Conflict: the key is held or done with another fingerprint.
	Conflict
	// Failed: the function failed or panicked; the claim was released.
	Failed
	// LeaseLost: the function succeeded, but the claim had lost its key.
	LeaseLost
	// Unrecorded: the function succeeded, but its marker was not written.
	Unrecorded
	// Unguarded: the function ran without a claim.
	Unguarded
	// Unavailable: the store failed; the function did not run.
	Unavailable
	// Rejected: the input was invalid; nothing ran.
	Rejected
	// Canceled: the caller's context ended first; nothing ran.
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

// String returns the outcome's name in logs and metrics, such as
// "lease_lost".
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

// New returns a Guard that keeps its claims in store. cfg may be nil. An
// invalid field gives an error naming it.
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

// MaxResultSize returns the Guard's Config.MaxResultSize, defaults applied.
func (g *Guard) MaxResultSize() int { return g.cfg.MaxResultSize }

// Logger returns the Guard's logger (Config.Logger).
func (g *Guard) Logger() *slog.Logger { return g.cfg.Logger }

// Do runs fn at most once at a time for key and, after fn succeeded, never
// again while the done marker is kept. A nil error means the delivery is
// handled.
//
//   - The key was free: fn runs, with a context cancelled with cause
//     ErrLeaseLost if the claim is lost. fn's error or panic comes back
//     unchanged: Failed. Success gives Ran, or LeaseLost or Unrecorded
//     with a nil error when its marker could not be written.
//   - Another copy runs: Running and a *RunningError.
//   - The key is done: Duplicate.
//   - The store failed: Unavailable, an error matching ErrStoreUnavailable.
//   - An empty key or a nil fn: Rejected.
//   - ctx ended first: Canceled, an error matching ctx.Err().
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

// Run is Do for a Job, whose result its duplicates get in Result.Value.
// Another fingerprint under the key gives Conflict (ErrConflict).
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

// Close closes the Listener that waiting copies share, once none waits, and
// returns its error if it closed at once. The Guard stays usable.
func (g *Guard) Close() error {
	return g.signal.Close()
}
