package redisstore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// noScriptFirst is a go-redis hook that answers the first command of the
// next pipeline with NOSCRIPT without sending it, as a server that has the
// claim script in its cache but not the complete script does (after a
// restart or a failover, a single Claim's EVAL has loaded the one, no
// Complete has loaded the other yet).
type noScriptFirst struct {
	arm      atomic.Bool
	noScript error
}

func (h *noScriptFirst) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *noScriptFirst) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}

func (h *noScriptFirst) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) < 2 || !h.arm.CompareAndSwap(true, false) {
			return next(ctx, cmds)
		}
		err := next(ctx, cmds[1:])
		cmds[0].SetErr(h.noScript)
		return err
	}
}

// When the complete script is missing from the server's cache (NOSCRIPT)
// and the claim script is not, the complete runs again on its own after
// the pipeline, so a claim of the same key in the batch runs first: it
// finds the key running rather than done, and is retried later; nothing is
// claimed twice and the marker is written.
func TestNoScriptInABatchClaimsNothingTwice(t *testing.T) {
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	noScript := rdb.EvalSha(ctx, "0000000000000000000000000000000000000000", nil).Err()
	require.True(t, redis.HasErrorPrefix(noScript, "NOSCRIPT"), "a NOSCRIPT error to replay: %v", noScript)

	hook := &noScriptFirst{noScript: noScript}
	rdb.AddHook(hook)
	s, err := redisstore.New(rdb, &redisstore.Config{Logger: quiet, SkipEvictionCheck: true})
	require.NoError(t, err)

	key := prefix + "k"
	first := driver.ClaimRequest{Key: key, Token: driver.NewToken(), Lease: time.Minute}
	r, err := s.Claim(ctx, first) // loads the claim script
	require.NoError(t, err)
	require.Equal(t, driver.StateClaimed, r.State)

	hook.arm.Store(true)
	replies, claimErrs, completeErrs := s.Batch(ctx,
		[]driver.CompleteRequest{{Key: key, Token: first.Token, Result: []byte("r"), Retention: time.Minute}},
		[]driver.ClaimRequest{{Key: key, Token: driver.NewToken(), Lease: time.Minute}})
	require.False(t, hook.arm.Load(), "the hook answered the pipeline's first command")
	require.NoError(t, completeErrs[0], "the marker is written, after NOSCRIPT, on its own")
	require.NoError(t, claimErrs[0])
	require.Contains(t, []driver.State{driver.StateRunning, driver.StateDone}, replies[0].State, "the key is held, then done: never claimed twice")
	r, err = s.Claim(ctx, driver.ClaimRequest{Key: key, Token: driver.NewToken(), Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, driver.StateDone, r.State, "the marker was written")
}
