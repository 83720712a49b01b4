package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobonce/jobonce/internal/redisops"
)

// startupTimeout is how long New waits for its reads of the server, which
// run together.
const startupTimeout = 2 * time.Second

// startupRead bounds each of New's reads: under startupTimeout, so that a
// read the server does not answer ends with its own error (an i/o timeout)
// before New stops waiting for it.
const startupRead = startupTimeout - 200*time.Millisecond

// errNoAnswer is the error of a read of New's that did not end within
// startupTimeout: one whose client's calls end neither with their context
// nor within a bound New can set (see New).
var errNoAnswer = fmt.Errorf("jobonce: redisstore: no answer within %s; "+
	"the read goes on until the server answers or the client is closed", startupTimeout)

// startUp makes New's reads of the server, together, and waits for them
// startupTimeout at most: with check, the check of the settings that can
// lose done markers (a policy but noeviction evicts them: every jobonce key
// has a TTL) and of the completion signal's channels (checkChannels); with
// probe, the WAITAOF probe. A read that did not end by then is left to end
// on its own (see New). A check that could not run says so at Warn, and the
// first claim makes it again; under Config.Strict it is the error. The error
// is otherwise the probe's refusal.
func (s *Store) startUp(every time.Duration, check, probe bool) error {
	wait, stop := context.WithTimeout(context.Background(), startupTimeout)
	defer stop()
	ctx, cancel := context.WithTimeout(wait, startupRead)
	defer cancel()
	var checked, channels, probed <-chan error
	if check {
		s.watch.next.Store(time.Now().Add(every).UnixNano())
		checked = inBackground(func() error { return s.watch.check(ctx, s.client) })
		channels = inBackground(func() error { return s.checkChannels(ctx) })
	}
	if probe {
		probed = inBackground(func() error { return probeWaitAOF(ctx, s.client) })
	}
	if check {
		if err := awaitRead(wait, checked); err != nil {
			if s.strict {
				return s.uncheckedError(err)
			}
			s.watch.checkLater(false)
			s.logger.Warn("jobonce: redisstore: New could not check the server's eviction policy and persistence, "+
				"which can lose done markers; the first claim checks again", "error", redacted(err, s.client))
		}
		if err := awaitRead(wait, channels); err != nil {
			s.logger.Debug("jobonce: redisstore: New could not check the completion signal's channels", "error", redacted(err, s.client))
		}
	}
	if !probe {
		return nil
	}
	switch err := awaitRead(wait, probed); {
	case err == nil:
	case redis.HasErrorPrefix(err, "ERR"):
		return fmt.Errorf("jobonce: redisstore: Config.WaitAOF needs WAITAOF (Redis 7.2 or later) and appendonly yes: %w", err)
	default:
		s.logger.Warn("jobonce: redisstore: New could not check that the server has WAITAOF and appendonly yes, "+
			"which Config.WaitAOF needs: without them every write is answered unacknowledged and every job fails closed",
			"error", redacted(err, s.client))
	}
	return nil
}

// probeWaitAOF asks the server for WAITAOF: a server without it, or without
// an append-only file, would answer every write unacknowledged, so every job
// would fail closed. A refusal is a Redis error starting "ERR".
func probeWaitAOF(ctx context.Context, client redis.UniversalClient) error {
	client, err := redisops.BoundedBy(ctx, client)
	if err != nil {
		return err
	}
	return client.Do(ctx, "WAITAOF", 1, 0, 1).Err()
}

// inBackground runs read in a goroutine and returns where its error comes.
// The goroutine ends when read does: the caller bounds read (redisops.BoundedBy), or
// leaves it to end on its own when the client allows no bound.
func inBackground(read func() error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- read() }()
	return done
}

// awaitRead returns the error that comes on done, or errNoAnswer once wait
// ends first.
func awaitRead(wait context.Context, done <-chan error) error {
	select {
	case err := <-done:
		return err
	case <-wait.Done():
		return errNoAnswer
	}
}

// checkIfDue checks the servers' state (see Config.CheckEvery) when a check
// is due, or the check at New has not run yet, within the caller's call:
// bounded by its context and by checkTimeout, whatever the client's
// ContextTimeoutEnabled and ReadTimeout (see redisops.BoundedBy).
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
			s.watch.checkLater(false) // the other call may be a periodic check that fails
		}
	case err != nil:
		if retry {
			s.watch.checkLater(true)
		}
		s.logger.DebugContext(ctx, "jobonce: redisstore: could not read the server's state", "error", redacted(err, s.client))
	case retry:
		s.logger.InfoContext(ctx, "jobonce: redisstore: the check New could not make has run")
	}
}

// checkTimeout bounds a check of the servers' state within a call.
const checkTimeout = 250 * time.Millisecond

// defaultKeyPrefix is core.Config.KeyPrefix's default: the stored keys,
// and so the channels of the completion signal, of a Guard that keeps it
// start with it.
const defaultKeyPrefix = "jobonce:"

// checkChannels checks that the user may use the channels under
// defaultKeyPrefix, where the completion signal of a Guard with the
// default KeyPrefix publishes, and says at Info when it may not (NOPERM).
// The Store cannot tell a Guard's KeyPrefix: a Listener whose subscription
// is refused says so at Warn.
func (s *Store) checkChannels(ctx context.Context) error {
	ok, err := redisops.ChannelAllowed(ctx, s.client, defaultKeyPrefix)
	if err != nil || ok {
		return err
	}
	s.logger.Info("jobonce: redisstore: the Redis user may not use the channels under " + defaultKeyPrefix + ", where the completion signal " +
		"of a Guard with the default KeyPrefix publishes: copies that wait for its running jobs poll the store instead of being woken; " +
		"grant ACL &" + defaultKeyPrefix + "* (&<KeyPrefix>* for another prefix), or allchannels")
	return nil
}
