package redisstore

import (
	"cmp"
	"context"
	"errors"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/redis/go-redis/v9"
)

// errUnanswered is the error of a pipelined command that the client left
// without a reply or an error of its own.
var errUnanswered = errors.New("jobonce: redisstore: the pipeline ended without answering this request")

// Batch implements driver.BatchStore: the complete scripts, then the claim
// scripts, pipelined in one round trip. Every request gets a reply or an
// error; a request the pipeline did not answer gets an error (wrapping ctx's
// error once ctx is done), never a zero reply. A nil complete error means
// that request's done marker was written.
func (s *Store) Batch(ctx context.Context, completes []driver.CompleteRequest, claims []driver.ClaimRequest) ([]driver.ClaimReply, []error, []error) {
	replies := make([]driver.ClaimReply, len(claims))
	errs := s.pipeline(ctx, len(completes)+len(claims), func(i int) (*redis.Script, string, []any, error) {
		if i < len(completes) {
			args, err := s.completeArgs(&completes[i])
			return completeScript, completes[i].Key, args, err
		}
		req := &claims[i-len(completes)]
		args, err := s.claimArgs(req)
		return claimScript, req.Key, args, err
	}, func(i int, cmd *redis.Cmd) error {
		if i < len(completes) {
			return tokenChecked(ctx, cmd)
		}
		v, err := cmd.Result()
		if err != nil {
			return cancelled(ctx, err)
		}
		replies[i-len(completes)], err = claimReply(v)
		return err
	})
	return replies, errs[len(completes):], errs[:len(completes):len(completes)]
}

// pipeline runs n scripts in one pipeline with EVALSHA; call(i) gives the
// script of entry i, its key and its arguments. Entries that find their
// script missing (NOSCRIPT, after a restart or failover) are run again on
// their own through Script.Run, which loads it. Entries whose arguments are
// invalid are not sent and keep call's error.
func (s *Store) pipeline(ctx context.Context, n int,
	call func(i int) (*redis.Script, string, []any, error), reply func(i int, cmd *redis.Cmd) error,
) []error {
	errs := make([]error, n)
	cmds := make([]*redis.Cmd, n)
	type entry struct {
		script *redis.Script
		keys   []string
		argv   []any
	}
	entries := make([]entry, n)
	pipe := s.client.Pipeline()
	for i := range n {
		script, key, argv, err := call(i)
		if err != nil {
			errs[i] = err
			continue
		}
		entries[i] = entry{script, []string{key}, argv}
		cmds[i] = script.EvalSha(ctx, pipe, entries[i].keys, argv...)
	}
	if pipe.Len() == 0 {
		return errs
	}
	_, execErr := pipe.Exec(ctx) // errors are read per command
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		if err := cmd.Err(); err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")) {
			e := entries[i]
			cmd = e.script.Run(ctx, s.client, e.keys, e.argv...)
		}
		if cmd.Err() == nil && cmd.Val() == nil {
			// Every script replies with a value; none means no reply came.
			cmd.SetErr(cmp.Or(execErr, errUnanswered))
		}
		errs[i] = reply(i, cmd)
	}
	return errs
}
