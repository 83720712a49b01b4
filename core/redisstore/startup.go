package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// startupTimeout bounds each of New's reads of the server.
const startupTimeout = 2 * time.Second

// checkAtStart makes the first check of the watch: the settings that can
// lose done markers (a policy but noeviction evicts them: every jobonce key
// has a TTL). A check that could not run says so at Warn, and the first
// claim makes it again.
func (s *Store) checkAtStart(every time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), startupTimeout)
	defer cancel()
	s.watch.next.Store(time.Now().Add(every).UnixNano())
	if err := s.watch.check(ctx, s.client); err != nil {
		s.watch.again.Store(true)
		s.logger.WarnContext(ctx, "jobonce: redisstore: New could not check the server's eviction policy and persistence, "+
			"which can lose done markers; the first claim checks again", "error", redacted(err, s.client))
	}
}

// probeWaitAOF asks the server for WAITAOF: a server without it, or without
// an append-only file, would answer every write unacknowledged, so every job
// would fail closed. It returns that refusal as an error, and says at Warn
// when it got no answer.
func (s *Store) probeWaitAOF() error {
	ctx, cancel := context.WithTimeout(context.Background(), startupTimeout)
	defer cancel()
	err := s.client.Do(ctx, "WAITAOF", 1, 0, 1).Err()
	switch {
	case err == nil:
		return nil
	case redis.HasErrorPrefix(err, "ERR"):
		return fmt.Errorf("jobonce: redisstore: Config.WaitAOF needs WAITAOF (Redis 7.2 or later) and appendonly yes: %w", err)
	}
	s.logger.WarnContext(ctx, "jobonce: redisstore: New could not check that the server has WAITAOF and appendonly yes, "+
		"which Config.WaitAOF needs: without them every write is answered unacknowledged and every job fails closed",
		"error", redacted(err, s.client))
	return nil
}

// checkIfDue checks the servers' state (see Config.CheckEvery) when a check
// is due, or the check at New could not run, within the caller's call and
// context.
func (s *Store) checkIfDue(ctx context.Context) {
	due, retry := s.watch.due()
	if !due {
		return
	}
	// The call's answer waits for the check: a slow server delays it by
	// checkTimeout at most, and the check waits for the next period.
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	switch err := s.watch.check(ctx, s.client); {
	case errors.Is(err, errChecking):
		if retry {
			s.watch.again.Store(true) // the other call may be a periodic check that fails
		}
	case err != nil:
		s.logger.DebugContext(ctx, "jobonce: redisstore: could not read the server's state", "error", redacted(err, s.client))
	case retry:
		s.logger.InfoContext(ctx, "jobonce: redisstore: the check New could not make has run")
	}
}

// checkTimeout bounds a check of the servers' state within a call.
const checkTimeout = 250 * time.Millisecond
