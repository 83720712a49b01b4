package riveronce

import (
	"context"
	"fmt"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/jobonce/jobonce/core"
)

// runner holds what Middleware and Wrap share: the guard and the settings.
type runner struct {
	g   *core.Guard
	cfg Config
}

func newRunner(g *core.Guard, cfg *Config, caller string) (*runner, error) {
	if g == nil {
		return nil, fmt.Errorf("jobonce: riveronce: %s: Guard is nil", caller)
	}
	return &runner{g: g, cfg: cfg.withDefaults()}, nil
}

// guardedKey marks a context whose job already runs under a claim, so that a
// Wrap inside Middleware (or the other way round) does not claim the same
// key again and find it running forever.
type guardedKey struct{}

func guarded(ctx context.Context) bool { return ctx.Value(guardedKey{}) != nil }

// run works one job under the guard and maps the outcome to River's control
// flow:
//
//   - ran, or a duplicate of a job that is done: nil (completed);
//   - another copy holds the key: river.JobSnooze(RetryAfter), which River
//     does not count as an attempt;
//   - conflict or invalid key: river.JobCancel, since a retry cannot help;
//   - store unreachable: an error matching core.ErrStoreUnavailable, which
//     River retries as a failed attempt (fail closed);
//   - the job's context ended before the claim was answered (core.Canceled):
//     an error matching ctx.Err(), never cancelled or discarded by us; River
//     makes a job its client's stop interrupted available again without
//     using an attempt, and retries one past its JobTimeout as a failed
//     attempt;
//   - the job failed: its error, unchanged.
func (r *runner) run(ctx context.Context, row *rivertype.JobRow, args any, work func(context.Context) error) error {
	if guarded(ctx) {
		return work(ctx)
	}
	job := r.cfg.job(row, args)
	if !job.Unguarded {
		// A skipped job holds no claim: a Wrap or WrapTx inside still guards it.
		ctx = context.WithValue(ctx, guardedKey{}, r)
	}
	// Run reports LeaseLost and Unrecorded to the guard's observer, log and
	// metrics; the job ran either way, so River completes it.
	res, err := r.g.Run(ctx, job, func(ctx context.Context) ([]byte, error) { return nil, work(ctx) })
	return outcomeError(row, res.Outcome, err)
}

// outcomeError turns a guard outcome and its error into the error a River
// worker returns.
func outcomeError(row *rivertype.JobRow, out core.Outcome, err error) error {
	switch out {
	case core.Running:
		d, _ := core.RetryAfter(err)
		return river.JobSnooze(d)
	case core.Conflict, core.Rejected:
		return river.JobCancel(fmt.Errorf("jobonce: riveronce: job %d (kind %q): %w", row.ID, row.Kind, err))
	case core.Canceled:
		return err // matches ctx.Err(): the job did not run, and may run later
	}
	return err
}
