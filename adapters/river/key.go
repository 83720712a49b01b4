package riveronce

import "github.com/riverqueue/river/rivertype"

// DefaultKey returns the key the middleware gives job under a Config without
// Key (as Wrap does for args that are not a Keyer): the key recorded in its
// metadata at insert (MetadataKey), else a periodic occurrence's key (see
// the package doc), else Kind, ":" and core.Fingerprint of the encoded args,
// which a row read from the database holds in PostgreSQL's jsonb form.
func DefaultKey(job *rivertype.JobRow) string {
	j, _ := (&Config{}).job(job, nil)
	return j.Key
}
