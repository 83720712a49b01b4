package riveronce

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river/rivertype"

	"github.com/jobonce/jobonce/core"
)

// River's periodic job enqueuer marks the jobs it inserts with these
// metadata fields: "periodic" always, "river:periodic_job_id" when the
// periodic job has an ID (river.PeriodicJobOpts.ID).
const (
	metadataPeriodic   = "periodic"
	metadataPeriodicID = "river:periodic_job_id"
)

// metadataOccurrence is the metadata field in which the middleware, acting
// at insert, records a periodic job's occurrence: the ScheduledAt River's
// enqueuer gave it (occurrenceTime). River moves a job's scheduled_at on
// every snooze, retry and rescue, so the worked row's ScheduledAt cannot
// name the occurrence.
const metadataOccurrence = "jobonce_occurrence"

var periodicField = []byte(`"` + metadataPeriodic + `"`)

// periodicMetadata is what a job's metadata says of its periodic job.
type periodicMetadata struct {
	ID         string // "" when none
	Occurrence string // "" when none was recorded
	// unusable, when not nil, says which field holds a value the middleware
	// cannot use (an ID that is not a string, an occurrence that is not an
	// RFC 3339 time); ID and Occurrence are then not to be used.
	unusable error
}

// readPeriodic reads metadata's periodic fields; ok is false for a job River's
// periodic job enqueuer did not insert ("periodic" is not true). Each field
// is decoded on its own, so that one garbled field leaves the job periodic.
func readPeriodic(metadata []byte) (m periodicMetadata, ok bool) {
	if !bytes.Contains(metadata, periodicField) {
		return m, false
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(metadata, &fields); err != nil {
		return m, false
	}
	var periodic bool
	if raw, ok := fields[metadataPeriodic]; !ok || json.Unmarshal(raw, &periodic) != nil || !periodic {
		return m, false
	}
	if raw, ok := fields[metadataPeriodicID]; ok {
		m.ID, m.unusable = stringField(metadataPeriodicID, raw, "a string")
	}
	if raw, ok := fields[metadataOccurrence]; ok && m.unusable == nil {
		m.Occurrence, m.unusable = stringField(metadataOccurrence, raw, "an RFC 3339 time")
		if m.unusable == nil {
			if _, err := time.Parse(time.RFC3339Nano, m.Occurrence); err != nil {
				m.unusable = unusableField(metadataOccurrence, raw, "an RFC 3339 time")
			}
		}
	}
	if m.unusable != nil {
		m.ID, m.Occurrence = "", ""
	}
	return m, true
}

// stringField decodes raw, the value of metadata field name, as a JSON
// string, or says it is not want.
func stringField(name string, raw json.RawMessage, want string) (string, error) {
	var v *string
	if err := json.Unmarshal(raw, &v); err != nil || v == nil {
		return "", unusableField(name, raw, want)
	}
	return *v, nil
}

// unusableField says that metadata field name holds raw, not want.
func unusableField(name string, raw json.RawMessage, want string) error {
	const max = 64
	shown := string(raw)
	if len(shown) > max {
		shown = shown[:max] + "…"
	}
	return fmt.Errorf("metadata field %q holds %s, not %s", name, shown, want)
}

// occurrenceTime is the stable form of a periodic occurrence's time: UTC,
// to the microsecond PostgreSQL keeps, in RFC 3339.
func occurrenceTime(t time.Time) string {
	return t.UTC().Truncate(time.Microsecond).Format(time.RFC3339Nano)
}

// periodicKey returns the default key of a job that River's periodic job
// enqueuer inserted, naming its occurrence, and whether row is one:
//
//   - with the occurrence recorded at insert: Kind, ":periodic:", the periodic
//     job's ID and the occurrence's time ("kind:periodic:ID:TIME"); without
//     an ID, the time and core.Fingerprint of the encoded args
//     ("kind:periodic:TIME:FP"), which tell apart periodic jobs of one kind
//     due at the same time;
//   - without it (inserted by a client without the middleware), or when the
//     occurrence or the periodic job's ID is unusable (then said by
//     unusable): Kind, ":periodic:job:" and the job's ID, which its retries,
//     snoozes and rescues keep, so the job still runs once.
func periodicKey(row *rivertype.JobRow) (key string, ok bool, unusable error) {
	m, ok := readPeriodic(row.Metadata)
	switch {
	case !ok:
		return "", false, nil
	case m.Occurrence == "":
		return row.Kind + ":periodic:job:" + strconv.FormatInt(row.ID, 10), true, m.unusable
	case m.ID != "":
		return row.Kind + ":periodic:" + m.ID + ":" + m.Occurrence, true, nil
	default:
		return row.Kind + ":periodic:" + m.Occurrence + ":" + core.Fingerprint(row.EncodedArgs), true, nil
	}
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
	if _, ok := readPeriodic(p.Metadata); !ok {
		return p.Metadata, nil
	}
	return withMetadata(p.Metadata, metadataOccurrence, occurrenceTime(*p.ScheduledAt))
}
