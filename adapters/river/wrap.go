package riveronce

import (
	"context"
	"errors"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/nilcheck"
)

// wrapped is a river.Worker that runs its inner worker under the guard.
type wrapped[T river.JobArgs] struct {
	inner river.Worker[T]
	r     *runner
}

// Wrap returns a worker that runs w at most once per key. Register it with
// river.AddWorker. It keeps w's Timeout, NextRetry and Middleware. On a
// client with the riveronce middleware, the middleware leaves the job to
// Wrap, so Wrap's key wins.
//
// The key is Config.Key, else the args' OnceKey (Keyer), else DefaultKey.
// Outcomes map to River's control flow:
//
//   - the job ran, or is done already: nil, and River completes it;
//   - another copy holds the key: the copy waits for its outcome when the
//     Guard lets it (Config.WaitRunning); otherwise, or if the job still
//     runs, river.JobSnooze with the Guard's RetryAfter hint, which uses no
//     attempt;
//   - the key holds a different payload (core.ErrConflict), or is empty
//     (core.ErrInvalidKey): river.JobCancel;
//   - the store fails: w does not run, unless the Guard fails open, and an
//     error matching core.ErrStoreUnavailable goes back; River retries it;
//   - the job's context ends before the claim is answered: an error
//     matching ctx.Err(), and w does not run;
//   - w fails or panics: the claim is released, and w's error or panic
//     reaches River unchanged.
//
// A job that Config.Unguarded reports runs w unguarded. docs/river.md has
// the details of each case. Wrap returns an error when g or w is nil.
func Wrap[T river.JobArgs](g *core.Guard, w river.Worker[T], cfg *Config) (river.Worker[T], error) {
	if nilcheck.IsNil(w) {
		return nil, errors.New("jobonce: riveronce: Wrap: worker is nil")
	}
	r, err := newRunner(g, cfg, "Wrap")
	if err != nil {
		return nil, err
	}
	return &wrapped[T]{inner: w, r: r}, nil
}

// MustWrap is Wrap for the one-line river.AddWorker form. It panics with
// Wrap's error.
func MustWrap[T river.JobArgs](g *core.Guard, w river.Worker[T], cfg *Config) river.Worker[T] {
	return must(Wrap(g, w, cfg))
}

// must is the body of the Must forms: v, or a panic with err.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// Middleware returns the inner worker's middleware after the mark that
// leaves the job to Wrap's claim.
func (w *wrapped[T]) Middleware(job *rivertype.JobRow) []rivertype.WorkerMiddleware {
	return withMark(w.inner.Middleware(job))
}

// withMark returns inner after the mark.
func withMark(inner []rivertype.WorkerMiddleware) []rivertype.WorkerMiddleware {
	if len(inner) == 0 {
		return markOnly // full: an append copies it
	}
	return append([]rivertype.WorkerMiddleware{mark}, inner...)
}

// wrapMark is the worker middleware Wrap and WrapTx put before their
// worker's own: River runs a worker's middleware around the client's, so the
// mark reaches the riveronce middleware first and tells it that the wrapper
// claims or records the job, with the key its Config and the decoded args
// give.
type wrapMark struct{ river.MiddlewareDefaults }

var (
	mark     rivertype.WorkerMiddleware = &wrapMark{}
	markOnly                            = []rivertype.WorkerMiddleware{mark}
)

// wrappedKey marks a context whose job is worked by a Wrap; its value is the
// job's row.
type wrappedKey struct{}

// Work implements rivertype.WorkerMiddleware.
func (*wrapMark) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	return doInner(context.WithValue(ctx, wrappedKey{}, job))
}

// wrappedJob reports whether job is worked by a Wrap or WrapTx that claims
// or records it.
func wrappedJob(ctx context.Context, job *rivertype.JobRow) bool {
	row, _ := ctx.Value(wrappedKey{}).(*rivertype.JobRow)
	return row != nil && row == job
}

// NextRetry returns the inner worker's next retry time.
func (w *wrapped[T]) NextRetry(job *river.Job[T]) time.Time { return w.inner.NextRetry(job) }

// Timeout returns the inner worker's timeout.
func (w *wrapped[T]) Timeout(job *river.Job[T]) time.Duration { return w.inner.Timeout(job) }

// Work runs the inner worker under the guard.
func (w *wrapped[T]) Work(ctx context.Context, job *river.Job[T]) error {
	return w.r.run(ctx, job.JobRow, job.Args, func(ctx context.Context) error {
		return w.inner.Work(ctx, job)
	})
}
