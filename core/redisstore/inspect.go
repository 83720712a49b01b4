package redisstore

import (
	"context"
	"errors"
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

// Inspect reads a stored key (see core.Guard.StoredKey) without changing it.
func (s *Store) Inspect(ctx context.Context, key string) (Record, error) {
	var get *redis.StringCmd
	var ttl *redis.DurationCmd
	var now *redis.TimeCmd
	_, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, key)
		ttl = p.PTTL(ctx, key)
		now = p.Time(ctx)
		return nil
	})
	if errors.Is(err, redis.Nil) {
		return Record{}, nil
	}
	if err != nil {
		return Record{}, cancelled(ctx, err)
	}
	v := get.Val()
	reply, err := parseValue(v, ttl.Val().Milliseconds())
	if err != nil {
		return Record{}, err
	}
	rec := Record{State: reply.State, Fingerprint: reply.Fingerprint, Result: reply.Result, TTL: ttl.Val(), Value: v}
	if rec.State == driver.StateRunning {
		copy(rec.Token[:], v[1:ownerLen])
		rec.Fence = runningFence(v)
		if rec.Fence != 0 {
			rec.Age = now.Val().Sub(time.UnixMicro(rec.Fence))
		}
	}
	return rec, nil
}
