package riveronce

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/riverqueue/river/rivertype"

	"github.com/jobonce/jobonce/internal/jobkey"
)

// metadataOccurrence is the metadata field in which the middleware, acting
// at insert, records a periodic job's occurrence: the ScheduledAt River's
// enqueuer gave it. River moves a job's scheduled_at on every snooze, retry
// and rescue, so the worked row's ScheduledAt cannot name the occurrence.
const metadataOccurrence = jobkey.RiverOccurrence

// periodicKey returns the default key of a job that River's periodic job
// enqueuer inserted, naming its occurrence, and whether row is one (see
// jobkey.RiverPeriodicKey); unusable, when not nil, says why it is keyed by
// its job ID instead.
func periodicKey(row *rivertype.JobRow) (key string, ok bool, unusable error) {
	return jobkey.RiverPeriodicKey(row.Kind, row.ID, row.EncodedArgs, row.Metadata)
}

// periodicWarning logs, once, a periodic job keyed by its job ID because its
// metadata holds an occurrence or a periodic job ID the middleware cannot
// use.
type periodicWarning struct{ logged atomic.Bool }

func (w *periodicWarning) log(ctx context.Context, logger *slog.Logger, row *rivertype.JobRow, unusable error) {
	if unusable == nil || !w.logged.CompareAndSwap(false, true) {
		return
	}
	logger.WarnContext(ctx, "jobonce: riveronce: a periodic job's "+unusable.Error()+
		": keyed by its job ID instead (kind:periodic:job:ID), so each job still runs once, but an occurrence inserted twice (by a new leader) runs twice; "+
		"the middleware, in the inserting client's river.Config.Middleware, records the occurrence at insert; later such jobs are not logged",
		"kind", row.Kind, "job_id", row.ID)
}

// recordOccurrence returns the metadata of a job being inserted with its
// periodic occurrence recorded, when River's periodic job enqueuer inserts
// it (which sets its ScheduledAt to the occurrence's time), in place of any
// value the field held, and metadata as it is otherwise.
func recordOccurrence(p *rivertype.JobInsertParams) ([]byte, error) {
	if p.ScheduledAt == nil {
		return p.Metadata, nil
	}
	if _, ok := jobkey.ReadPeriodic(p.Metadata); !ok {
		return p.Metadata, nil
	}
	return withMetadata(p.Metadata, metadataOccurrence, jobkey.RiverOccurrenceTime(*p.ScheduledAt))
}
