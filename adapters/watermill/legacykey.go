package watermillonce

import (
	"context"

	"github.com/jobonce/jobonce/core"
)

// runUnderLegacyKey runs job as Guard.Run does, under legacyKey, the key
// the earlier release gave it (Config.LegacyDefaultKeys), and within that
// claim under job's own key, so that a copy either release ran, or runs, is
// found, and both done markers are written with the same result. run gets
// the legacy claim's job context for the values the handler sees (the
// idempotency key and fence the earlier release's handlers see) and the
// inner claim's, which the loss of either claim ends. When the legacy key
// was free, the inner claim's outcome is the message's (the outer claim
// reports its function, the inner run, as Ran or Failed).
func (m *middleware) runUnderLegacyKey(ctx context.Context, job core.Job, legacyKey string, run func(valuesCtx, jobCtx context.Context) ([]byte, error)) (core.Result, error) {
	outer := job
	outer.Key = legacyKey
	var inner core.Result
	var innerErr error
	innerRan := false
	res, err := m.g.Run(ctx, outer, func(legacyCtx context.Context) ([]byte, error) {
		inner, innerErr = m.g.Run(legacyCtx, job, func(jobCtx context.Context) ([]byte, error) {
			return run(legacyCtx, jobCtx)
		})
		innerRan = true
		return inner.Value, innerErr
	})
	if innerRan && inner.Outcome != core.Ran {
		return inner, innerErr
	}
	return res, err
}
