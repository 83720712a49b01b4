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
	g     *core.Guard
	cfg   Config
	batch *batcher // nil: one claim and one completion per job
}

func newRunner(g *core.Guard, cfg *Config, caller string) *runner {
	if g == nil {
		panic("riveronce: " + caller + ": guard is nil")
	}
	c, err := cfg.withDefaults()
	if err != nil {
		panic("riveronce: " + caller + ": " + err.Error())
	}
	r := &runner{g: g, cfg: c}
	if _, ok := g.Store().(core.BatchStore); ok && c.MaxBatch > 1 {
		r.batch = newBatcher(g, c.MaxBatch)
	}
	return r
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
//   - the job failed: its error, unchanged.
func (r *runner) run(ctx context.Context, row *rivertype.JobRow, args any, work func(context.Context) error) error {
	if guarded(ctx) || (r.cfg.Skip != nil && r.cfg.Skip(row)) {
		return work(ctx)
	}
	job := r.cfg.job(row, args)
	ctx = context.WithValue(ctx, guardedKey{}, r)
	fn := func(ctx context.Context) ([]byte, error) { return nil, work(ctx) }
	if r.batch == nil {
		res, err := r.g.Run(ctx, job, fn)
		return outcomeError(row, res.Outcome, err)
	}
	req := &jobReq{ctx: ctx, job: job}
	r.batch.claims.submit(req)
	res, err := req.claim.Work(ctx, fn)
	if err != nil || res.Outcome != core.Ran {
		return outcomeError(row, res.Outcome, err)
	}
	// The job ran; its done marker is written with those of other jobs.
	r.batch.finishes.submit(req)
	return nil
}

// outcomeError turns a guard outcome and its error into the error a River
// worker returns.
func outcomeError(row *rivertype.JobRow, out core.Outcome, err error) error {
	switch out {
	case core.Running:
		d, _ := core.RetryAfter(err)
		return river.JobSnooze(d)
	case core.Conflict, core.Rejected:
		return river.JobCancel(fmt.Errorf("riveronce: job %d (kind %q): %w", row.ID, row.Kind, err))
	}
	return err
}
