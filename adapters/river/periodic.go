package riveronce

import (
	"bytes"
	"encoding/json"
	"strconv"
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
	Periodic   bool   `json:"periodic"`
	ID         string `json:"river:periodic_job_id"`
	Occurrence string `json:"jobonce_occurrence"`
}

// readPeriodic reads metadata's periodic fields; ok is false for a job River's
// periodic job enqueuer did not insert.
func readPeriodic(metadata []byte) (periodicMetadata, bool) {
	var m periodicMetadata
	if !bytes.Contains(metadata, periodicField) {
		return m, false
	}
	if err := json.Unmarshal(metadata, &m); err != nil || !m.Periodic {
		return m, false
	}
	return m, true
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
//   - without it (inserted by a client without the middleware): Kind,
//     ":periodic:job:" and the job's ID, which its retries, snoozes and
//     rescues keep.
func periodicKey(row *rivertype.JobRow) (string, bool) {
	m, ok := readPeriodic(row.Metadata)
	switch {
	case !ok:
		return "", false
	case m.Occurrence == "":
		return row.Kind + ":periodic:job:" + strconv.FormatInt(row.ID, 10), true
	case m.ID != "":
		return row.Kind + ":periodic:" + m.ID + ":" + m.Occurrence, true
	default:
		return row.Kind + ":periodic:" + m.Occurrence + ":" + core.Fingerprint(row.EncodedArgs), true
	}
}

// recordOccurrence returns the metadata of a job being inserted with its
// periodic occurrence recorded, when River's periodic job enqueuer inserts
// it (which sets its ScheduledAt to the occurrence's time), and metadata as
// it is otherwise.
func recordOccurrence(p *rivertype.JobInsertParams) ([]byte, error) {
	if p.ScheduledAt == nil {
		return p.Metadata, nil
	}
	if _, ok := readPeriodic(p.Metadata); !ok {
		return p.Metadata, nil
	}
	return withMetadata(p.Metadata, metadataOccurrence, occurrenceTime(*p.ScheduledAt))
}
