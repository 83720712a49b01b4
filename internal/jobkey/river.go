package jobkey

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/jobonce/jobonce/core"
)

// River job metadata fields: River's periodic job enqueuer marks the jobs it
// inserts with RiverPeriodic (always) and RiverPeriodicID (when the periodic
// job has an ID); riveronce records a Keyer's key under RiverKey and a
// periodic job's occurrence under RiverOccurrence when it acts at insert.
const (
	RiverPeriodic   = "periodic"
	RiverPeriodicID = "river:periodic_job_id"
	RiverKey        = "jobonce_key"
	RiverOccurrence = "jobonce_occurrence"
)

var (
	riverKeyField      = []byte(`"` + RiverKey + `"`)
	riverPeriodicField = []byte(`"` + RiverPeriodic + `"`)
)

// RiverMetadataKey returns the key recorded in a job's metadata at insert
// (RiverKey), and whether one is.
func RiverMetadataKey(metadata []byte) (string, bool) {
	if !bytes.Contains(metadata, riverKeyField) {
		return "", false
	}
	var m struct {
		Key *string `json:"jobonce_key"`
	}
	if err := json.Unmarshal(metadata, &m); err != nil || m.Key == nil {
		return "", false
	}
	return *m.Key, true
}

// Periodic is what a River job's metadata says of its periodic job.
type Periodic struct {
	ID         string // "" when none
	Occurrence string // "" when none was recorded
	// Unusable, when not nil, says which field holds a value that cannot
	// be used (an ID that is not a string, an occurrence that is not an
	// RFC 3339 time); ID and Occurrence are then "".
	Unusable error
}

// ReadPeriodic reads metadata's periodic fields; ok is false for a job
// River's periodic job enqueuer did not insert (RiverPeriodic is not true).
// Each field is decoded on its own, so that one garbled field leaves the job
// periodic.
func ReadPeriodic(metadata []byte) (m Periodic, ok bool) {
	if !bytes.Contains(metadata, riverPeriodicField) {
		return m, false
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(metadata, &fields); err != nil {
		return m, false
	}
	var periodic bool
	if raw, ok := fields[RiverPeriodic]; !ok || json.Unmarshal(raw, &periodic) != nil || !periodic {
		return m, false
	}
	if raw, ok := fields[RiverPeriodicID]; ok {
		m.ID, m.Unusable = stringField(RiverPeriodicID, raw, "a string")
	}
	if raw, ok := fields[RiverOccurrence]; ok && m.Unusable == nil {
		m.Occurrence, m.Unusable = stringField(RiverOccurrence, raw, "an RFC 3339 time")
		if m.Unusable == nil {
			if _, err := time.Parse(time.RFC3339Nano, m.Occurrence); err != nil {
				m.Unusable = unusableField(RiverOccurrence, raw, "an RFC 3339 time")
			}
		}
	}
	if m.Unusable != nil {
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

// RiverOccurrenceTime is the stable form of a periodic occurrence's time:
// UTC, to the microsecond PostgreSQL keeps, in RFC 3339.
func RiverOccurrenceTime(t time.Time) string {
	return t.UTC().Truncate(time.Microsecond).Format(time.RFC3339Nano)
}

// RiverPeriodicKey returns the default key of a job that River's periodic
// job enqueuer inserted, naming its occurrence, and whether the job is one:
//
//   - with the occurrence recorded at insert: kind, ":periodic:", the
//     periodic job's ID and the occurrence's time ("kind:periodic:ID:TIME");
//     without an ID, the time and core.Fingerprint of the encoded args
//     ("kind:periodic:TIME:FP"), which tell apart periodic jobs of one kind
//     due at the same time;
//   - without it, or when the occurrence or the periodic job's ID is
//     unusable (then said by unusable): kind, ":periodic:job:" and the job's
//     ID, which its retries, snoozes and rescues keep, so the job still runs
//     once.
func RiverPeriodicKey(kind string, id int64, args, metadata []byte) (key string, ok bool, unusable error) {
	m, ok := ReadPeriodic(metadata)
	switch {
	case !ok:
		return "", false, nil
	case m.Occurrence == "":
		return kind + ":periodic:job:" + strconv.FormatInt(id, 10), true, m.Unusable
	case m.ID != "":
		return kind + ":periodic:" + m.ID + ":" + m.Occurrence, true, nil
	default:
		return kind + ":periodic:" + m.Occurrence + ":" + core.Fingerprint(args), true, nil
	}
}
