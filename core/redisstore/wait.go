package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobonce/jobonce/core/driver"
)

// node is what a pipeline runs on: the Store's client, or on a Cluster one
// primary's client, so that WAIT covers the writes of its own connection.
type node interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
}

// waitFor is the acknowledgement writes need (Config.WaitReplicas,
// WaitAOF, WaitTimeout).
type waitFor struct {
	replicas int
	aof      bool
	timeout  time.Duration
}

func (w waitFor) on() bool { return w.replicas > 0 || w.aof }

// queue adds the wait to pipe, after the writes it must cover, and returns
// a function that reports, once pipe ran, whether they were acknowledged.
// WAIT and WAITAOF count the writes of the connection they run on, which is
// why they travel in the writes' pipeline.
func (w waitFor) queue(ctx context.Context, pipe redis.Pipeliner) func() error {
	ms := max(w.timeout.Milliseconds(), 1) // 0 would block for ever
	if w.aof {
		cmd := pipe.Do(ctx, "WAITAOF", 1, w.replicas, ms)
		return func() error {
			acks, err := cmd.Int64Slice()
			switch {
			case err != nil:
				return fmt.Errorf("%w: WAITAOF: %w", driver.ErrUnreplicated, err)
			case len(acks) != 2 || acks[0] < 1 || acks[1] < int64(w.replicas):
				return fmt.Errorf("%w: WAITAOF answered %v (local, replicas) within %s, %d replicas wanted",
					driver.ErrUnreplicated, acks, w.timeout, w.replicas)
			}
			return nil
		}
	}
	cmd := pipe.Do(ctx, "WAIT", w.replicas, ms)
	return func() error {
		n, err := cmd.Int64()
		switch {
		case err != nil:
			return fmt.Errorf("%w: WAIT: %w", driver.ErrUnreplicated, err)
		case n < int64(w.replicas):
			return fmt.Errorf("%w: %d of %d replicas within %s", driver.ErrUnreplicated, n, w.replicas, w.timeout)
		}
		return nil
	}
}
