package core_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

var idempotencyKeyForm = regexp.MustCompile(`^jobonce-[A-Za-z0-9_-]{22}$`)

// TestIdempotencyKey: a job's function gets one idempotency key for every
// copy and retry of the job, another for another job or another KeyPrefix,
// short and safe for an HTTP header; none outside a job's function.
func TestIdempotencyKey(t *testing.T) {
	ctx := context.Background()
	_, ok := core.IdempotencyKey(ctx)
	require.False(t, ok, "outside a job")

	keyOf := func(g *core.Guard, key string, fail bool) string {
		var got string
		_, _ = g.Do(ctx, key, func(ctx context.Context) error {
			k, ok := core.IdempotencyKey(ctx)
			require.True(t, ok)
			got = k
			if fail {
				return errors.New("fails, to be retried")
			}
			return nil
		})
		return got
	}
	g := testenv.MemGuard(t, nil)
	first := keyOf(g, "invoice:42", true)
	require.Regexp(t, idempotencyKeyForm, first)
	require.Len(t, first, 30)
	require.Equal(t, first, keyOf(g, "invoice:42", false), "the retry gets the same key")
	require.Equal(t, first, keyOf(testenv.MemGuard(t, nil), "invoice:42", false), "so does a copy on another worker")
	require.NotEqual(t, first, keyOf(g, "invoice:43", false), "another job")
	require.NotEqual(t, first, keyOf(testenv.MemGuard(t, &core.Config{KeyPrefix: "other:"}), "invoice:42", false), "another KeyPrefix")

	// Jobs that run without a claim have one too, when they have a key.
	open := testenv.NewGuard(t, downStore{memstore.New()}, &core.Config{FailOpen: true})
	require.Equal(t, first, keyOf(open, "invoice:42", false), "fail-open keeps the key")
	_, err := g.Run(ctx, core.Job{Unguarded: true}, func(ctx context.Context) ([]byte, error) {
		_, ok := core.IdempotencyKey(ctx)
		require.False(t, ok, "an unguarded job without a key has none")
		_, ok = core.Fence(ctx)
		require.False(t, ok, "nor a fence")
		return nil, nil
	})
	require.NoError(t, err)
}

// downStore is a store that cannot be reached.
type downStore struct{ *memstore.Store }

var errDown = fmt.Errorf("connection refused: %w", driver.ErrUnreachable)

func (downStore) Claim(context.Context, driver.ClaimRequest) (driver.ClaimReply, error) {
	return driver.ClaimReply{}, errDown
}

// TestIdempotencyKeyPrefixIsUnambiguous: a NUL byte in KeyPrefix or key
// cannot make two different stored keys share an idempotency key.
func TestIdempotencyKeyPrefixIsUnambiguous(t *testing.T) {
	keyOf := func(prefix, key string) string {
		var got string
		_, err := testenv.MemGuard(t, &core.Config{KeyPrefix: prefix}).Do(context.Background(), key, func(ctx context.Context) error {
			got, _ = core.IdempotencyKey(ctx)
			return nil
		})
		require.NoError(t, err)
		return got
	}
	require.NotEqual(t, keyOf("svc\x00a", "b"), keyOf("svc", "a\x00b"))
}

// TestCancelledCallerRunsNothingUnguarded: a claim answered before the
// caller's context ended, whose job would run without a claim (a store
// failure under FailOpen, a duplicate in shadow mode), runs nothing once the
// context has ended: Canceled.
func TestCancelledCallerRunsNothingUnguarded(t *testing.T) {
	done := testenv.MemGuard(t, &core.Config{Shadow: true})
	_, err := done.Do(context.Background(), "k", func(context.Context) error { return nil })
	require.NoError(t, err)
	for name, g := range map[string]*core.Guard{
		"shadow duplicate": done,
		"fail-open outage": testenv.NewGuard(t, downStore{memstore.New()}, &core.Config{FailOpen: true}),
	} {
		ctx, cancel := context.WithCancel(context.Background())
		c := g.Claim(ctx, core.Job{Key: "k"})[0]
		cancel()
		ran := false
		res, err := c.Work(ctx, func(context.Context) ([]byte, error) { ran = true; return nil, nil })
		require.False(t, ran, name)
		require.Equal(t, core.Canceled, res.Outcome, name)
		require.ErrorIs(t, err, context.Canceled, name)
	}
}

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
