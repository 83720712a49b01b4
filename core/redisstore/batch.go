package redisstore

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/jobonce/jobonce/core"
)

// ClaimBatch implements core.BatchStore: one pipelined round trip.
func (s *Store) ClaimBatch(ctx context.Context, reqs []core.ClaimRequest) ([]core.ClaimReply, []error) {
	replies := make([]core.ClaimReply, len(reqs))
	errs := s.pipeline(ctx, claimScript, len(reqs), func(i int) ([]string, []any, error) {
		r := reqs[i]
		return []string{r.Key}, []any{runningValue(r.Token, r.Fingerprint), millis(r.Lease)}, nil
	}, func(i int, cmd *redis.Cmd) error {
		v, err := cmd.Result()
		if err == nil {
			replies[i], err = claimReply(v)
		}
		return err
	})
	return replies, errs
}

// CompleteBatch implements core.BatchStore: one pipelined round trip.
func (s *Store) CompleteBatch(ctx context.Context, reqs []core.CompleteRequest) []error {
	return s.pipeline(ctx, completeScript, len(reqs), func(i int) ([]string, []any, error) {
		args, err := completeArgs(reqs[i])
		return []string{reqs[i].Key}, args, err
	}, func(_ int, cmd *redis.Cmd) error {
		return tokenChecked(cmd)
	})
}

// pipeline runs script n times in one pipeline with EVALSHA. Entries that
// find the script missing (NOSCRIPT, after a restart or failover) are run
// again on their own through Script.Run, which loads it.
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
	_, _ = pipe.Exec(ctx) // errors are read per command
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			cmd = script.Run(ctx, s.client, calls[i].keys, calls[i].argv...)
		}
		errs[i] = reply(i, cmd)
	}
	return errs
}
