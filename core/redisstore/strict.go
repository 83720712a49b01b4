package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/internal/redisops"
)

// riskError is the error of a Store made with Config.Strict whose servers
// can lose done markers. It matches driver.ErrStoreRisk.
type riskError struct{ msg string }

func (e *riskError) Error() string        { return e.msg }
func (e *riskError) Is(target error) bool { return target == driver.ErrStoreRisk }

// strictRisks returns, for the call op of a Store made with Config.Strict,
// the error naming each setting of the servers, as the latest check read
// them, that can lose done markers: an eviction policy but noeviction, no
// persistence (redisops.ServerInfo.Risks; a primary without replicas is a
// deployment's choice, which jobonce check reports), and with replicas, a
// server that is a replica. It is nil when none can, or before a check has
// succeeded.
func (w *watch) strictRisks(op string, replicas bool) error {
	infos := w.latest.Load()
	if infos == nil {
		return nil
	}
	var servers []string
	for _, info := range *infos {
		var details []string
		if replicas && info.Role == "slave" {
			details = append(details, "a replica (role slave): every claim fails (READONLY), or on a writable replica is lost at its next sync; give the primary's address")
		}
		for _, r := range info.Risks(0) {
			if r.Kind != redisops.RiskReplication {
				details = append(details, r.Detail)
			}
		}
		if len(details) > 0 {
			servers = append(servers, "at "+cmp.Or(info.Addr, "the primary")+": "+strings.Join(details, "; and "))
		}
	}
	if len(servers) == 0 {
		return nil
	}
	return &riskError{"jobonce: redisstore: " + op + ": Config.Strict refuses Redis " + strings.Join(servers, "; and ")}
}

// uncheckedError returns New's error, under Config.Strict, for its check of
// the server's settings that failed with err: it wraps driver.ErrUnreachable
// unless the server answered (a refused AUTH or INFO). A check that ran out
// of time is followed by one dial (dialCause), whose error names the cause.
func (s *Store) uncheckedError(err error) error {
	const msg = "jobonce: redisstore: New: could not read the server's eviction policy and persistence, which Config.Strict needs"
	cause := redactedError(err, s.client)
	var reply redis.Error
	if errors.As(err, &reply) {
		return fmt.Errorf("%s: %w", msg, cause)
	}
	if dialErr := dialCause(err, s.client); dialErr != nil {
		return fmt.Errorf("%s: %w: %w; a dial after it: %w", msg, driver.ErrUnreachable, cause, redactedError(dialErr, s.client))
	}
	return fmt.Errorf("%s: %w: %w", msg, driver.ErrUnreachable, cause)
}

// dialCauseTimeout bounds dialCause's dial.
const dialCauseTimeout = 250 * time.Millisecond

// dialCause returns the error of one dial to the server of client, a
// *redis.Client, made after a read that ended with err, its deadline or no
// answer: a client that retries its dials (go-redis's default) runs out the
// deadline and hides their error, such as a refused connection. It is nil
// for other errors, other clients, or a dial that succeeds.
func dialCause(err error, client redis.UniversalClient) error {
	c, ok := client.(*redis.Client)
	if !ok || !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, errNoAnswer) {
		return nil
	}
	opt := c.Options()
	if opt.Dialer == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), dialCauseTimeout)
	defer cancel()
	conn, err := opt.Dialer(ctx, opt.Network, opt.Addr)
	if err != nil {
		return err
	}
	_ = conn.Close()
	return nil
}
