package backends_test

import (
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	watermillonce "github.com/jobonce/jobonce/adapters/watermill"
	"github.com/jobonce/jobonce/adapters/watermill/internal/watermilltest"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/testenv"
)

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
	receipts := watermilltest.Subscribe(t, e.subscriber(t, "receipts-reader"), outTopic)
	acked := newDeliveries(t)
	out := &contextRecorder{Publisher: e.publisher(t)}
	startRouter(t, route{handler: "payments", sub: e.subscriber(t, "g"), topic: topic, pub: out, outTopic: outTopic,
		fn: func(msg *message.Message) ([]*message.Message, error) {
			receipt := watermilltest.NewMessage("receipt")
			receipt.SetContext(msg.Context())
			return []*message.Message{receipt}, nil
		}}, acked.middleware, watermillonce.MustMiddleware(g, nil))
	watermilltest.Publish(t, e.publisher(t), topic, watermilltest.NewMessage("pay 10 EUR"))
	acked.waitAcked(t, 1)
	require.Zero(t, acked.nacks.Load(), "the produced message's publish failed")
	require.Len(t, receipts.Wait(t, 1), 1)
	out.mu.Lock()
	require.Equal(t, []bool{false}, out.ended)
	require.Equal(t, []bool{true}, out.keyed)
	out.mu.Unlock()
	require.EqualValues(t, 1, outs.Get(core.Ran))
	require.Zero(t, outs.Get(core.Duplicate))
}
