package redisstore

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/jobonce/jobonce/internal/redisops"
)

// Ready implements driver.ReadyStore, for core.Guard.Ready. It sends PING
// to every server the client writes to, each bounded by ctx's deadline.
// Then it runs the check of the servers' settings if one is due. Under
// Config.Strict, a risk the latest check found gives an error matching
// driver.ErrStoreRisk.
func (s *Store) Ready(ctx context.Context) error {
	if err := s.ping(ctx); err != nil {
		return fmt.Errorf("jobonce: redisstore: PING %w", redactedError(cancelled(ctx, err), s.client))
	}
	s.checkIfDue(ctx)
	if s.strict {
		return s.watch.strictRisks("Ready", false)
	}
	return nil
}

// ping sends PING to every server the client writes to.
func (s *Store) ping(ctx context.Context) error {
	ping := func(ctx context.Context, client *redis.Client) error {
		c, err := redisops.BoundedBy(ctx, client)
		if err == nil {
			err = c.Ping(ctx).Err()
		}
		if err != nil {
			return &serverError{client.Options().Addr, err}
		}
		return nil
	}
	switch c := s.client.(type) {
	case *redis.Client:
		return ping(ctx, c)
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, ping)
	case *redis.Ring:
		return c.ForEachShard(ctx, ping)
	}
	if err := s.client.Ping(ctx).Err(); err != nil {
		return &serverError{"the server", err}
	}
	return nil
}

// serverError is the error of a call to the server at addr.
type serverError struct {
	addr string
	err  error
}

func (e *serverError) Error() string { return "on " + e.addr + ": " + e.err.Error() }
func (e *serverError) Unwrap() error { return e.err }
