package riveronce

import "github.com/riverqueue/river/rivertype"

// DefaultKey returns the key the middleware gives job under a Config without
// Key (and Wrap, for args that are not a Keyer): the key recorded in its
// metadata at insert (MetadataKey), even when empty, which the middleware
// rejects; else, for a job River's periodic job enqueuer inserted, a key
// naming its occurrence (see the package doc); else Kind, ":" and
// core.Fingerprint of the encoded args. A job row read back from the
// database holds its args as PostgreSQL's jsonb prints them, which is what
// the fingerprint is taken of.
func DefaultKey(job *rivertype.JobRow) string {
	j, _ := (&Config{}).job(job, nil)
	return j.Key
}
