package riveronce

import "github.com/riverqueue/river/rivertype"

// DefaultKey returns the key the middleware gives job when Config.Key is
// not set. It is the key recorded at insert (MetadataKey), else a periodic
// occurrence's key, else Kind, ":" and core.Fingerprint of the encoded
// args. A row read from the database holds the args in PostgreSQL's jsonb
// form, which is what is hashed.
func DefaultKey(job *rivertype.JobRow) string {
	j, _ := (&Config{}).job(job, nil)
	return j.Key
}
