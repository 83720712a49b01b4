package redisops

import (
	"cmp"
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// BoundedBy returns client for a call made with ctx, its every read and
// write of a connection bounded by the time left to ctx's deadline whatever
// its ContextTimeoutEnabled and ReadTimeout say: for a *redis.Client
// (single-node or failover), go-redis's Client.WithTimeout, a view on the
// same connections. A client of another type, or a ctx without a deadline,
// comes back as it is: its calls end with ctx only under
// ContextTimeoutEnabled. The error is ctx's when its deadline has passed.
func BoundedBy(ctx context.Context, client redis.UniversalClient) (redis.UniversalClient, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return client, nil
	}
	left := time.Until(deadline)
	if left <= 0 {
		return nil, cmp.Or(ctx.Err(), context.DeadlineExceeded)
	}
	if c, ok := client.(*redis.Client); ok {
		return c.WithTimeout(left), nil
	}
	return client, nil
}
