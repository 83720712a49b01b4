package redisstore

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/internal/redisops"
)

func init() { redisops.Inspect = inspect }

// inspect reads a stored key without changing it, for the jobonce command
// (redisops.Inspect).
func inspect(ctx context.Context, client redis.UniversalClient, key string) (redisops.Record, error) {
	var get *redis.StringCmd
	var ttl *redis.DurationCmd
	var now *redis.TimeCmd
	_, err := client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, key)
		ttl = p.PTTL(ctx, key)
		now = p.Time(ctx)
		return nil
	})
	if errors.Is(err, redis.Nil) {
		return redisops.Record{}, nil
	}
	if err != nil {
		return redisops.Record{}, cancelled(ctx, err)
	}
	v := get.Val()
	reply, err := parseValue(v, ttl.Val().Milliseconds())
	if err != nil {
		return redisops.Record{}, err
	}
	rec := redisops.Record{State: reply.State, Fingerprint: reply.Fingerprint, Result: reply.Result, TTL: ttl.Val(), Value: v}
	if rec.State == driver.StateRunning {
		copy(rec.Token[:], v[1:ownerLen])
		rec.Fence = runningFence(v)
		if rec.Fence != 0 {
			rec.Age = now.Val().Sub(time.UnixMicro(rec.Fence))
		}
	}
	return rec, nil
}
