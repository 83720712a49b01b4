package redisstore

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/internal/redisops"
)

func init() {
	redisops.Inspect = inspect
	redisops.ReadHead = readHead
}

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
		rec.Token, rec.Fence, rec.Age = claimOwner(v, now.Val())
	}
	return rec, nil
}

// claimOwner returns the token and fence of v, a running claim's value (or
// its first redisops.HeadLen bytes), and its age by the server's clock now;
// zero fence and age for a claim without a fence.
func claimOwner(v string, now time.Time) (token driver.Token, fence int64, age time.Duration) {
	copy(token[:], v[1:ownerLen])
	if fence = runningFence(v); fence != 0 {
		age = now.Sub(time.UnixMicro(fence))
	}
	return token, fence, age
}

// readHead decodes the first redisops.HeadLen bytes of a value, for the
// jobonce command's list (redisops.ReadHead).
func readHead(head string, ttl time.Duration, now time.Time) (redisops.Record, bool) {
	rec := redisops.Record{TTL: ttl}
	switch {
	case len(head) >= ownerLen+fenceLen && head[0] == tagRunning,
		len(head) >= ownerLen && head[0] == tagRunningUnfenced:
		rec.State = driver.StateRunning
		rec.Token, rec.Fence, rec.Age = claimOwner(head, now)
	case len(head) >= writerLen && head[0] == tagWriter,
		len(head) >= 1 && (head[0] == tagDoneFP || head[0] == tagDone || head[0] == tagDoneLong):
		rec.State = driver.StateDone
	default:
		return redisops.Record{}, false
	}
	return rec, true
}
