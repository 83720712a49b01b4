package riveronce

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/testenv"
)

// TestWrapInsideAMiddlewareClaimClaimsItsOwnKey: a Wrap whose job the
// middleware claimed under another key (its Work called from the
// middleware's) claims its own key too, and that claim decides: two jobs
// with one OnceKey and different args run once, and the second is
// cancelled as a conflict, as under Wrap alone.
func TestWrapInsideAMiddlewareClaimClaimsItsOwnKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var outs testenv.Outcomes
	g := testenv.MemGuard(t, &core.Config{Observer: outs.Observe})
	mw := MustMiddleware(g, nil)
	var runs atomic.Int32
	w := MustWrap[noteArgs](g, river.WorkFunc(func(context.Context, *river.Job[noteArgs]) error {
		runs.Add(1)
		return nil
	}), nil)
	work := func(id int64, args noteArgs, encoded string) error {
		r := row(id, args.Kind(), encoded)
		return mw.Work(ctx, r, func(ctx context.Context) error {
			return w.Work(ctx, &river.Job[noteArgs]{JobRow: r, Args: args})
		})
	}
	require.NoError(t, work(1, noteArgs{User: "9", Note: "a"}, `{"user":"9","note":"a"}`))
	err := work(2, noteArgs{User: "9", Note: "b"}, `{"user":"9","note":"b"}`)
	var cancel *rivertype.JobCancelError
	require.ErrorAs(t, err, &cancel)
	require.ErrorIs(t, err, core.ErrConflict)
	require.EqualValues(t, 1, runs.Load())
	require.EqualValues(t, 1, outs.Get(core.Conflict), "the inner claim of note:9 decided")
}

// TestWrapInsideAMiddlewareClaimOfItsOwnKeyClaimsOnce: when the middleware
// holds the key a Wrap inside gives, Wrap runs its worker under that claim
// rather than claiming the key again and finding it running.
func TestWrapInsideAMiddlewareClaimOfItsOwnKeyClaimsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var outs testenv.Outcomes
	g := testenv.MemGuard(t, &core.Config{Observer: outs.Observe})
	mw := MustMiddleware(g, &Config{Key: func(job *rivertype.JobRow) string { return "note:9" }})
	var runs atomic.Int32
	w := MustWrap[noteArgs](g, river.WorkFunc(func(context.Context, *river.Job[noteArgs]) error {
		runs.Add(1)
		return nil
	}), nil)
	r := row(1, "riveronce_note", `{"user":"9","note":"a"}`)
	require.NoError(t, mw.Work(ctx, r, func(ctx context.Context) error {
		return w.Work(ctx, &river.Job[noteArgs]{JobRow: r, Args: noteArgs{User: "9", Note: "a"}})
	}))
	require.EqualValues(t, 1, runs.Load())
	require.EqualValues(t, 1, outs.Get(core.Ran))
	require.Len(t, outs.Events(), 1, "one claim, no Running answer to itself")
}

// TestMiddlewareLeavesAMarkedJobToWrap: the mark Wrap puts before its
// worker's middleware makes the middleware pass the job through without a
// claim of its own.
func TestMiddlewareLeavesAMarkedJobToWrap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var outs testenv.Outcomes
	mw := MustMiddleware(testenv.MemGuard(t, &core.Config{Observer: outs.Observe}), nil)
	w := MustWrap[noteArgs](testenv.MemGuard(t, nil), river.WorkFunc(func(context.Context, *river.Job[noteArgs]) error {
		return nil
	}), nil)
	r := row(1, "riveronce_note", `{"user":"9"}`)
	marks := w.Middleware(r)
	require.Len(t, marks, 1)
	var reached bool
	require.NoError(t, marks[0].Work(ctx, r, func(ctx context.Context) error {
		return mw.Work(ctx, r, func(ctx context.Context) error {
			reached = true
			require.False(t, guarded(ctx), "the middleware holds no claim")
			return nil
		})
	}))
	require.True(t, reached)
	require.Empty(t, outs.Events(), "the middleware claimed nothing")

	other := row(2, "riveronce_note", `{"user":"9"}`)
	require.NoError(t, marks[0].Work(ctx, r, func(ctx context.Context) error {
		return mw.Work(ctx, other, func(context.Context) error { return nil })
	}))
	require.EqualValues(t, 1, outs.Get(core.Ran), "a mark names its own job only")
}
