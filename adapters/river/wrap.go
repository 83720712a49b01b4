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

// Wrap returns a worker that runs w at most once per key: register it with
// river.AddWorker (or use MustWrap inside the call). It keeps w's Timeout,
// NextRetry and Middleware. On a client with the riveronce middleware, the
// middleware leaves the job to Wrap, so the key Wrap gives wins: Wrap adds
// a worker middleware of its own, before w's, that marks the job as Wrap's.
//
// The key is Config.Key if set, else the args' OnceKey if they implement
// Keyer, else a key recorded in the job's metadata by the middleware at insert,
// else Kind + ":" + core.Fingerprint of the encoded args. Outcomes map to
// River's control flow:
//
//   - the job ran, or it is done already (a duplicate): nil, so River
//     completes the job;
//   - another copy holds the key: river.JobSnooze with the claim's RetryAfter
//     hint; a snooze does not use one of the job's attempts;
//   - the key is done or held with a different fingerprint (core.ErrConflict),
//     or the key is empty (core.ErrInvalidKey): river.JobCancel;
//   - Config.Unguarded reports the job: w runs unguarded (core.Unguarded);
//   - the store cannot be reached: an error matching core.ErrStoreUnavailable
//     and w does not run (fail closed); River retries it as a failed attempt;
//   - w fails or panics: the claim is released and w's error (or panic) goes
//     to River unchanged.
//
// It returns an error when g or w is nil.
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

// MustWrap is Wrap for the one-line river.AddWorker(workers, ...) form: it
// panics, with Wrap's error, when g or w is nil.
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
	inner := w.inner.Middleware(job)
	if len(inner) == 0 {
		return markOnly // full: an append copies it
	}
	return append([]rivertype.WorkerMiddleware{mark}, inner...)
}

// wrapMark is the worker middleware Wrap puts before its worker's own: River
// runs a worker's middleware around the client's, so the mark reaches the
// riveronce middleware first and tells it that Wrap claims the job, with the
// key Wrap's Config and the decoded args give.
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

// wrappedJob reports whether job is worked by a Wrap that claims it.
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
