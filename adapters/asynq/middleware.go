package asynqonce

import (
	"context"
	"errors"
	"fmt"

	"github.com/hibiken/asynq"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/jobkey"
	"github.com/jobonce/jobonce/internal/nilcheck"
)

// NewMiddleware returns an Asynq middleware that runs each task once per
// key through g. Use it with mux.Use, or call it on a handler: mw(h). cfg
// may be nil for the defaults. Set IsFailure and RetryDelay in the server's
// asynq.Config too.
//
// For each task the middleware derives a key (Config.Key) and claims it:
//
//   - The key is free: the handler runs. Its error or panic releases the
//     claim and goes back to Asynq unchanged. Success records the done
//     marker, with the result given to SetResult.
//   - The key is done: the handler does not run, and the task is
//     acknowledged. A stored result is written to its ResultWriter.
//   - Another copy runs: the copy waits for its outcome when the Guard lets
//     it (Config.WaitRunning). Otherwise, or if the job still runs, the
//     error matches core.ErrRunning, and IsFailure reports false for it. A
//     copy with no retries left waits up to its deadline instead.
//   - The key holds a different payload (core.ErrConflict), or is empty
//     (core.ErrInvalidKey): the error also matches asynq.SkipRetry, so Asynq
//     archives the task.
//   - The store fails: the handler does not run, unless the Guard fails
//     open. The error matches core.ErrStoreUnavailable, and Asynq retries
//     the task.
//   - The task's context ends before the claim is answered: the handler does
//     not run, and the error matches ctx.Err().
//
// docs/asynq.md has the details of each case. NewMiddleware returns an
// error for a nil Guard or an invalid Config.
func NewMiddleware(g *core.Guard, cfg *Config) (asynq.MiddlewareFunc, error) {
	if g == nil {
		return nil, errors.New("jobonce: asynqonce: NewMiddleware: Guard is nil")
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	m := &middleware{g: g, cfg: c, unguarded: newTypeSet(c.UnguardedTypes), periodic: newTypeSet(c.PeriodicTypes), check: serverCheck{logger: g.Logger()}}
	if err := checkPeriodicTypes(c.PeriodicTypes, m.unguarded); err != nil {
		return nil, err
	}
	return m.wrap, nil
}

// MustMiddleware is NewMiddleware for the one-line mux.Use form. It panics
// with NewMiddleware's error.
func MustMiddleware(g *core.Guard, cfg *Config) asynq.MiddlewareFunc {
	mw, err := NewMiddleware(g, cfg)
	if err != nil {
		panic(err)
	}
	return mw
}

// source names Asynq in metrics and logs (Job.Source).
const source = "asynq"

type middleware struct {
	g         *core.Guard
	cfg       Config
	unguarded typeSet
	periodic  typeSet
	check     serverCheck
}

func (m *middleware) wrap(next asynq.Handler) asynq.Handler {
	if nilcheck.IsNil(next) {
		return asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
			return errors.New("jobonce: asynqonce: the middleware was given a nil handler")
		})
	}
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		return m.process(ctx, t, next)
	})
}

func (m *middleware) process(ctx context.Context, t *asynq.Task, next asynq.Handler) error {
	m.check.redelivered(ctx)
	rs := &taskResult{task: t}
	ctx = context.WithValue(ctx, taskResultKey{}, rs)
	job := m.job(ctx, t)
	exhausted := retriesExhausted(ctx)
	if !job.Unguarded {
		job.WaitUntil = m.waitUntil(ctx, exhausted)
		job.HoldsWorker = exhausted // see waitExhausted
	}
	fn := func(ctx context.Context) ([]byte, error) {
		err := next.ProcessTask(ctx, t)
		return rs.value, err
	}
	res, err := m.g.Run(ctx, job, fn)
	if exhausted && err != nil && (errors.Is(err, core.ErrRunning) || errors.Is(err, core.ErrStoreUnavailable)) {
		res, err = m.waitExhausted(ctx, job, fn, res, err)
	}
	switch {
	case res.Outcome == core.Canceled:
		return &canceledError{err: err}
	case err == nil:
		if res.Outcome == core.Duplicate && len(res.Value) > 0 {
			if w := t.ResultWriter(); w != nil {
				if _, werr := w.Write(res.Value); werr != nil {
					return fmt.Errorf("jobonce: asynqonce: write the stored result to the duplicate's ResultWriter: %w", werr)
				}
			}
		}
		return nil
	case errors.Is(err, core.ErrInvalidKey) && m.periodic.has(t.Type()):
		return errNoTaskID(t, err)
	case errors.Is(err, core.ErrRunning):
		return m.check.sentBack(ctx, err)
	case errors.Is(err, core.ErrConflict), errors.Is(err, core.ErrInvalidKey):
		return fmt.Errorf("%w (%w)", err, asynq.SkipRetry)
	default:
		return err
	}
}

// job returns the task's job: unguarded for UnguardedTypes, keyed by its
// task for PeriodicTypes, else keyed by Config.Key (or the default); in
// each case fingerprinted by Config.Fingerprint when set.
func (m *middleware) job(ctx context.Context, t *asynq.Task) core.Job {
	if m.unguarded.has(t.Type()) {
		return core.Job{Kind: t.Type(), Source: source, Unguarded: true} // no key: no idempotency key either
	}
	var fp func() string
	if m.cfg.Fingerprint != nil {
		fp = func() string { return m.cfg.Fingerprint(t) }
	}
	if m.periodic.has(t.Type()) {
		return jobkey.Occurrence(source, t.Type(), occurrenceKey(ctx, t), fp)
	}
	var key string
	if m.cfg.Key != nil {
		key = m.cfg.Key(t)
	}
	job := jobkey.Job(source, t.Type(), t.Payload(), key, m.cfg.Key != nil, fp)
	if job.DefaultKey {
		job.KeyHint = keyHint
	}
	return job
}

// keyHint is what the first skip under the default key says of it.
var keyHint = core.KeyHint{Key: "task type and payload hash",
	Settings: "asynqonce: set Config.Key, or list the task type in Config.PeriodicTypes (tasks of an asynq.Scheduler, or of EnqueueOnce once per window) or Config.UnguardedTypes"}
