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

// ClaimBatch implements driver.BatchStore: one pipelined round trip. Every
// request gets a reply or an error; a request the pipeline did not answer
// gets an error (wrapping ctx's error once ctx is done), never a zero reply.
func (s *Store) ClaimBatch(ctx context.Context, reqs []driver.ClaimRequest) ([]driver.ClaimReply, []error) {
	replies := make([]driver.ClaimReply, len(reqs))
	errs := s.pipeline(ctx, claimScript, len(reqs), func(i int) ([]string, []any, error) {
		args, err := claimArgs(&reqs[i])
		return []string{reqs[i].Key}, args, err
	}, func(i int, cmd *redis.Cmd) error {
		v, err := cmd.Result()
		if err != nil {
			return cancelled(ctx, err)
		}
		replies[i], err = claimReply(v)
		return err
	})
	return replies, errs
}

// CompleteBatch implements driver.BatchStore: one pipelined round trip. A nil
// error means that request's done marker was written; a request the pipeline
// did not answer gets an error (wrapping ctx's error once ctx is done).
func (s *Store) CompleteBatch(ctx context.Context, reqs []driver.CompleteRequest) []error {
	return s.pipeline(ctx, completeScript, len(reqs), func(i int) ([]string, []any, error) {
		args, err := completeArgs(&reqs[i])
		return []string{reqs[i].Key}, args, err
	}, func(_ int, cmd *redis.Cmd) error {
		return tokenChecked(ctx, cmd)
	})
}

// pipeline runs script n times in one pipeline with EVALSHA. Entries that
// find the script missing (NOSCRIPT, after a restart or failover) are run
// again on their own through Script.Run, which loads it. Entries whose
// arguments are invalid are not sent and keep args' error.
func (s *Store) pipeline(ctx context.Context, script *redis.Script, n int,
	args func(i int) ([]string, []any, error), reply func(i int, cmd *redis.Cmd) error,
) []error {
	errs := make([]error, n)
	cmds := make([]*redis.Cmd, n)
	type call struct {
		keys []string
		argv []any
	}
	calls := make([]call, n)
	pipe := s.client.Pipeline()
	for i := range n {
		keys, argv, err := args(i)
		if err != nil {
			errs[i] = err
			continue
		}
		calls[i] = call{keys, argv}
		cmds[i] = script.EvalSha(ctx, pipe, keys, argv...)
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
			cmd = script.Run(ctx, s.client, calls[i].keys, calls[i].argv...)
		}
		if cmd.Err() == nil && cmd.Val() == nil {
			// Every script replies with a value; none means no reply came.
			cmd.SetErr(cmp.Or(execErr, errUnanswered))
		}
		errs[i] = reply(i, cmd)
	}
	return errs
}
