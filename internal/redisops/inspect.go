package redisops

import (
	"context"
	"time"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/redis/go-redis/v9"
)

// Record is a stored key's state, as Inspect reads it for operators.
type Record struct {
	// State is StateRunning or StateDone; zero when the key is absent.
	State driver.State
	// Token is a running claim's token.
	Token driver.Token
	// Fence is a running claim's fencing token (see driver.ClaimReply);
	// zero for a claim written by a version before fences.
	Fence int64
	// Fingerprint is the payload fingerprint kept with the claim or marker.
	Fingerprint string
	// Result is a done marker's stored result.
	Result []byte
	// TTL is the remaining lease of a claim, or the remaining retention of a
	// done marker.
	TTL time.Duration
	// Age is how long a running claim has been held: the server's clock
	// (TIME, read with the key) less the claim's Fence, the server's clock
	// when it was taken. Age plus TTL exceeds the lease the claim was taken
	// with only once its lease was renewed. Zero without a Fence. On a Ring,
	// TIME may come from another shard's clock.
	Age time.Duration
	// Value is the key's value as stored, for a change made only if the key
	// still holds it (the jobonce command's forget deletes a done marker so).
	Value string
}

// Inspect reads a stored key (see core.Guard.StoredKey) without changing
// it. The value format is redisstore's own: redisstore sets Inspect when it
// is initialised.
var Inspect func(ctx context.Context, client redis.UniversalClient, key string) (Record, error)
