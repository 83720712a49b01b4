package storecall

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core/driver"
)

// A batch whose send panics, or answers with the wrong number of replies,
// fails every request: none reads a missing answer as success.
func TestBatchFailsEveryRequestOfAPanickingOrMisshapedSend(t *testing.T) {
	in := []int{1, 2, 3}
	_, errs := Batch(context.Background(), func(context.Context, []int) ([]int, []error) { panic("store exploded") }, in)
	require.Len(t, errs, 3)
	for _, err := range errs {
		require.ErrorIs(t, err, ErrPanicked)
	}
	_, errs = Batch(context.Background(), func(_ context.Context, in []int) ([]int, []error) {
		return make([]int, len(in)-1), make([]error, len(in)-1)
	}, in)
	require.Len(t, errs, 3)
	for _, err := range errs {
		require.ErrorIs(t, err, ErrBatchReplies)
	}
}

// completer is a store whose Complete answers with errs, one per call, then
// nil.
type completer struct {
	driver.Store
	errs  []error
	calls int
}

func (c *completer) Complete(context.Context, driver.CompleteRequest) error {
	c.calls++
	if len(c.errs) == 0 {
		return nil
	}
	err := c.errs[0]
	c.errs = c.errs[1:]
	return err
}

// CompleteWithin retries a failed done marker until it is written, stops
// at once when the token lost the key, and gives the last error when its
// context ends first.
func TestCompleteWithinRetriesUntilWrittenOrFinal(t *testing.T) {
	flaky := errors.New("connection reset")
	ctx := context.Background()

	c := &completer{errs: []error{flaky, flaky}}
	require.NoError(t, New(c, time.Second, slog.Default()).CompleteWithin(ctx, driver.CompleteRequest{}, nil))
	require.Equal(t, 3, c.calls, "two failures, then the marker")

	c = &completer{errs: []error{driver.ErrLeaseLost, nil}}
	require.ErrorIs(t, New(c, time.Second, slog.Default()).CompleteWithin(ctx, driver.CompleteRequest{}, nil), driver.ErrLeaseLost)
	require.Equal(t, 1, c.calls, "a lost lease is final")

	c = &completer{errs: []error{flaky, flaky, flaky, flaky, flaky, flaky, flaky, flaky}}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, New(c, time.Second, slog.Default()).CompleteWithin(sctx, driver.CompleteRequest{}, nil), flaky)
}

// panicking is a store whose every call panics.
type panicking struct{ driver.Store }

func (panicking) Claim(context.Context, driver.ClaimRequest) (driver.ClaimReply, error) {
	panic("claim exploded")
}

func (panicking) Release(context.Context, string, driver.Token) error { panic("release exploded") }

// A store call that panics fails with ErrPanicked.
func TestStoreCallThatPanicsFailsWithErrPanicked(t *testing.T) {
	s := New(panicking{}, time.Second, slog.Default())
	_, err := s.Claim(context.Background(), driver.ClaimRequest{})
	require.ErrorIs(t, err, ErrPanicked)
	require.ErrorIs(t, s.TryRelease(context.Background(), "k", driver.NewToken()), ErrPanicked)
}
