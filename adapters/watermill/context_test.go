package watermillonce_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	watermillonce "github.com/jobonce/jobonce/adapters/watermill"
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
		out = newMessage("receipt")
		out.SetContext(msg.Context())
		return []*message.Message{out}, nil
	})
	_, err := h(newMessage("pay"))
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
	_, err := h(newMessage("long"))
	require.ErrorIs(t, err, core.ErrLeaseLost)
}

// contextRecorder records, for each message it publishes, whether its
// context had ended and whether it carried an idempotency key.
type contextRecorder struct {
	message.Publisher
	mu           sync.Mutex
	ended, keyed []bool
}

func (p *contextRecorder) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	for _, m := range msgs {
		_, ok := core.IdempotencyKey(m.Context())
		p.ended, p.keyed = append(p.ended, m.Context().Err() != nil), append(p.keyed, ok)
	}
	p.mu.Unlock()
	return p.Publisher.Publish(topic, msgs...)
}

// A handler hands msg.Context() to the message it produces, as for tracing;
// redisstream's publisher honours it (XADD with the message's context).
// The router publishes the message after the middleware returned: it goes
// out at the first delivery, and the message is acked, not nacked and run
// again as a duplicate.
func TestRouterPublishesAMessageProducedWithTheMessageContext(t *testing.T) {
	t.Parallel()
	e := newRedisStreamEnv(t).(*redisStreamEnv)
	var outs testenv.Outcomes
	g := e.guard(t, &core.Config{Observer: outs.Observe})
	topic, outTopic := e.topic("payments"), e.topic("receipts")
	receipts := subscribe(t, e.subscriber(t, "receipts-reader"), outTopic)
	acked := newDeliveries(t)
	out := &contextRecorder{Publisher: e.publisher(t)}
	startRouter(t, route{handler: "payments", sub: e.subscriber(t, "g"), topic: topic, pub: out, outTopic: outTopic,
		fn: func(msg *message.Message) ([]*message.Message, error) {
			receipt := newMessage("receipt")
			receipt.SetContext(msg.Context())
			return []*message.Message{receipt}, nil
		}}, acked.middleware, watermillonce.MustMiddleware(g, nil))
	publish(t, e.publisher(t), topic, newMessage("pay 10 EUR"))
	acked.waitAcked(t, 1)
	require.Zero(t, acked.nacks.Load(), "the produced message's publish failed")
	require.Len(t, receipts.wait(t, 1), 1)
	out.mu.Lock()
	require.Equal(t, []bool{false}, out.ended)
	require.Equal(t, []bool{true}, out.keyed)
	out.mu.Unlock()
	require.EqualValues(t, 1, outs.Get(core.Ran))
	require.Zero(t, outs.Get(core.Duplicate))
}
