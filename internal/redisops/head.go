package redisops

import "time"

// HeadLen is how many leading bytes of a stored value ReadHead needs: a
// running claim's tag, token and fence.
const HeadLen = 25

// ReadHead decodes the first HeadLen bytes of a stored value (GETRANGE key 0
// HeadLen-1), with the key's TTL and the server's clock when it was read,
// into a Record without Fingerprint, Result and Value; ok is false for a
// value jobonce did not write. The value format is redisstore's own:
// redisstore sets ReadHead when it is initialised.
var ReadHead func(head string, ttl time.Duration, now time.Time) (rec Record, ok bool)
