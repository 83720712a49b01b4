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
	g        *core.Guard
	cfg      Config
	periodic periodicWarning
}

func newRunner(g *core.Guard, cfg *Config, caller string) (*runner, error) {
	if g == nil {
		return nil, fmt.Errorf("jobonce: riveronce: %s: Guard is nil", caller)
	}
	return &runner{g: g, cfg: cfg.withDefaults()}, nil
}

// heldKey marks a context whose job already runs under a claim; its value is
// the heldClaim.
type heldKey struct{}

// heldClaim is a key a job's context holds a claim of, and the claim it
// runs inside, if any.
type heldClaim struct {
	key   string
	outer *heldClaim
}

// guarded reports whether ctx runs under a claim.
func guarded(ctx context.Context) bool { return ctx.Value(heldKey{}) != nil }

// holds reports whether ctx runs under a claim of key, so that a Wrap
// inside the middleware (or the other way round) never claims a key its own
// job holds and finds it running forever.
func holds(ctx context.Context, key string) bool {
	for c, _ := ctx.Value(heldKey{}).(*heldClaim); c != nil; c = c.outer {
		if c.key == key {
			return true
		}
	}
	return false
}

// run works one job under the guard and maps the outcome to River's control
// flow:
//
//   - ran, or a duplicate of a job that is done: nil (completed);
//   - another copy holds the key: the copy waits for its outcome
//     (Config.WaitRunning) when the Guard lets it, and then completes as a
//     duplicate or runs; otherwise, or still running:
//     river.JobSnooze(RetryAfter), which River does not count as an
//     attempt;
//   - conflict or invalid key: river.JobCancel, since a retry cannot help;
//   - store unreachable: an error matching core.ErrStoreUnavailable, which
//     River retries as a failed attempt (fail closed);
//   - the job's context ended before the claim was answered (core.Canceled):
//     an error matching ctx.Err(), never cancelled or discarded by us; River
//     makes a job its client's stop interrupted available again without
//     using an attempt, and retries one past its JobTimeout as a failed
//     attempt;
//   - the job failed: its error, unchanged.
//
// Inside a claim of the same job (a Wrap whose job the middleware claimed,
// which River's order of middleware avoids), run claims its own key too
// when it differs, and that inner claim decides; a key the job holds
// already, or a job Config.Unguarded exempts, just runs.
func (r *runner) run(ctx context.Context, row *rivertype.JobRow, args any, work func(context.Context) error) error {
	job, unusable := r.cfg.job(row, args)
	r.periodic.log(ctx, r.g.Logger(), row, unusable)
	if guarded(ctx) && (job.Unguarded || holds(ctx, job.Key)) {
		return work(ctx)
	}
	if !job.Unguarded {
		// A skipped job holds no claim: a Wrap or WrapTx inside still guards it.
		outer, _ := ctx.Value(heldKey{}).(*heldClaim)
		ctx = context.WithValue(ctx, heldKey{}, &heldClaim{key: job.Key, outer: outer})
		job.WaitUntil = r.cfg.waitUntil(ctx)
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
