package core_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/testenv"
)

// The job context (jobContext, no longer context.WithValue) under
// context.WithCancelCause: the caller's cancellation reaches the job's
// context at once, as a child cancelCtx registered with its parent (had
// propagateCancel not found the parent's cancelCtx through Value, it would
// start a goroutine and the job's context would end only later); nested
// Guards each see their own idempotency key and fence, and the outer one's
// come back after the inner job.
func TestJobContextEndsWithItsCallerAndNests(t *testing.T) {
	outer := testenv.MemGuard(t, nil)
	inner := testenv.MemGuard(t, &core.Config{KeyPrefix: "inner:"})
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	var outerKey, innerKey string
	var outerFence, innerFence int64
	_, err := outer.Do(parent, "outer", func(ctx1 context.Context) error {
		var ok bool
		outerKey, ok = core.IdempotencyKey(ctx1)
		require.True(t, ok)
		outerFence, ok = core.Fence(ctx1)
		require.True(t, ok)
		_, err := inner.Do(ctx1, "inner", func(ctx2 context.Context) error {
			var ok bool
			innerKey, ok = core.IdempotencyKey(ctx2)
			require.True(t, ok)
			innerFence, ok = core.Fence(ctx2)
			require.True(t, ok)
			require.NoError(t, ctx2.Err())
			cancel() // the outermost caller gives up
			require.ErrorIs(t, ctx1.Err(), context.Canceled, "the outer job's context ends at once")
			require.ErrorIs(t, ctx2.Err(), context.Canceled, "so does the inner job's")
			return nil
		})
		require.NoError(t, err)
		k, ok := core.IdempotencyKey(ctx1)
		require.True(t, ok)
		require.Equal(t, outerKey, k, "the outer job's key after the inner job")
		return nil
	})
	require.NoError(t, err)
	require.NotEqual(t, outerKey, innerKey)
	require.Positive(t, outerFence)
	require.Positive(t, innerFence)
}
