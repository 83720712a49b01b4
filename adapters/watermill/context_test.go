package watermillonce_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	watermillonce "github.com/jobonce/jobonce/adapters/watermill"
	"github.com/jobonce/jobonce/adapters/watermill/internal/watermilltest"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// A message a handler produced with msg.Context() keeps a live context
// after the handler returns, with the job's idempotency key and fence: the
// router publishes it after the middleware has returned.
func TestProducedMessageContextOutlivesTheHandler(t *testing.T) {
	t.Parallel()
	var out *message.Message
	h := watermillonce.MustMiddleware(testenv.MemGuard(t, nil), nil)(func(msg *message.Message) ([]*message.Message, error) {
		out = watermilltest.NewMessage("receipt")
		out.SetContext(msg.Context())
		return []*message.Message{out}, nil
	})
	_, err := h(watermilltest.NewMessage("pay"))
	require.NoError(t, err)
	require.NoError(t, out.Context().Err(), "the produced message's context ended with the handler")
	_, ok := core.IdempotencyKey(out.Context())
	require.True(t, ok)
	_, ok = core.Fence(out.Context())
	require.True(t, ok)
}

// lostLease is a memstore whose claims are lost at their first renewal.
type lostLease struct{ *memstore.Store }

func (lostLease) Extend(context.Context, string, driver.Token, time.Duration) error {
	return driver.ErrLeaseLost
}

// A claim lost while the handler runs cancels msg.Context() with cause
// core.ErrLeaseLost.
func TestLostLeaseCancelsTheMessageContext(t *testing.T) {
	t.Parallel()
	g := testenv.NewGuard(t, lostLease{memstore.New()}, &core.Config{Lease: 30 * time.Millisecond})
	h := watermillonce.MustMiddleware(g, nil)(func(msg *message.Message) ([]*message.Message, error) {
		select {
		case <-msg.Context().Done():
			return nil, context.Cause(msg.Context())
		case <-time.After(10 * time.Second):
			return nil, nil
		}
	})
	_, err := h(watermilltest.NewMessage("long"))
	require.ErrorIs(t, err, core.ErrLeaseLost)
}
