package watermillonce_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	watermillonce "github.com/jobonce/jobonce/adapters/watermill"
	"github.com/jobonce/jobonce/adapters/watermill/internal/watermilltest"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// onceOn returns a publisher that publishes through a new GoChannel once per
// key, the counter of what reaches the GoChannel, and the GoChannel.
func onceOn(t *testing.T, g *core.Guard, cfg *watermillonce.PublisherConfig) (message.Publisher, *watermilltest.CountingPublisher, *gochannel.GoChannel) {
	t.Helper()
	ps := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	t.Cleanup(func() { _ = ps.Close() })
	inner := &watermilltest.CountingPublisher{Publisher: ps}
	pub, err := watermillonce.NewPublisher(g, inner, cfg)
	require.NoError(t, err)
	return pub, inner, ps
}

// A retried Publish reuses the message's UUID: it is published once per
// topic. Another UUID, or another topic, is published.
func TestPublisherPublishesEachUUIDOnce(t *testing.T) {
	t.Parallel()
	pub, inner, ps := onceOn(t, testenv.MemGuard(t, nil), nil)
	got := watermilltest.Subscribe(t, ps, "orders")
	msg := watermilltest.NewMessage("ship order 1")
	watermilltest.Publish(t, pub, "orders", msg)
	watermilltest.Publish(t, pub, "orders", msg) // a retry after an error that was not one
	require.EqualValues(t, 1, inner.Msgs.Load())
	require.Equal(t, msg.UUID, got.Wait(t, 1)[0].UUID)

	watermilltest.Publish(t, pub, "audit", msg)
	watermilltest.Publish(t, pub, "orders", watermilltest.NewMessage("ship order 1"))
	require.EqualValues(t, 3, inner.Msgs.Load(), "another topic, another UUID")
	require.Len(t, got.Wait(t, 2), 2)
	require.NoError(t, pub.Close())
}

// One Publish of several messages publishes those not published before one
// at a time, in order; a key repeated within the call goes out once.
func TestPublisherPublishesEachMessageOnItsOwn(t *testing.T) {
	t.Parallel()
	ps := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	t.Cleanup(func() { _ = ps.Close() })
	var calls [][]string
	recorder := &recordingPublisher{Publisher: ps, record: func(msgs []*message.Message) {
		var uuids []string
		for _, m := range msgs {
			uuids = append(uuids, m.UUID)
		}
		calls = append(calls, uuids)
	}}
	pub, err := watermillonce.NewPublisher(testenv.MemGuard(t, nil), recorder, nil)
	require.NoError(t, err)
	a, b, c := watermilltest.NewMessage("a"), watermilltest.NewMessage("b"), watermilltest.NewMessage("c")
	watermilltest.Publish(t, pub, "t", a)
	watermilltest.Publish(t, pub, "t", b, a, b, c)
	require.Equal(t, [][]string{{a.UUID}, {b.UUID}, {c.UUID}}, calls, "a was published before, b goes out once")

	watermilltest.Publish(t, pub, "t", a, b, c)
	require.Len(t, calls, 3, "nothing left to publish: no call")
}

// When publishing fails, the failed message's claim is released and the
// error comes back unchanged: the retry publishes every message.
func TestPublisherFailureReleasesTheKeys(t *testing.T) {
	t.Parallel()
	ps := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	t.Cleanup(func() { _ = ps.Close() })
	boom := errors.New("broker unreachable")
	flaky := &watermilltest.FlakyPublisher{Publisher: ps, Err: boom}
	flaky.Fails.Store(1)
	pub, err := watermillonce.NewPublisher(testenv.MemGuard(t, nil), flaky, nil)
	require.NoError(t, err)
	a, b := watermilltest.NewMessage("a"), watermilltest.NewMessage("b")
	require.Same(t, boom, pub.Publish("t", a, b))
	watermilltest.Publish(t, pub, "t", a, b)
	require.EqualValues(t, 2, flaky.Published.Load(), "both went out on the retry")
	watermilltest.Publish(t, pub, "t", a, b)
	require.EqualValues(t, 2, flaky.Published.Load())
}

// PublisherConfig.Key names a message by a metadata field; an empty key
// publishes nothing. After Window, the key is published again.
func TestPublisherKeyAndWindow(t *testing.T) {
	t.Parallel()
	pub, inner, _ := onceOn(t, testenv.MemGuard(t, nil), &watermillonce.PublisherConfig{
		Key:    func(m *message.Message) string { return m.Metadata.Get("order_id") },
		Window: 100 * time.Millisecond,
	})
	order := func(id string) *message.Message {
		m := watermilltest.NewMessage("ship")
		m.Metadata.Set("order_id", id)
		return m
	}
	watermilltest.Publish(t, pub, "orders", order("o-1"))
	watermilltest.Publish(t, pub, "orders", order("o-1"))
	require.EqualValues(t, 1, inner.Msgs.Load(), "another UUID, one order")

	err := pub.Publish("orders", order("o-2"), watermilltest.NewMessage("no order id"))
	require.ErrorIs(t, err, core.ErrInvalidKey)
	require.ErrorContains(t, err, "PublisherConfig.Key returned an empty key")
	require.EqualValues(t, 1, inner.Msgs.Load(), "nothing of the call was published")

	require.Eventually(t, func() bool {
		watermilltest.Publish(t, pub, "orders", order("o-1"))
		return inner.Msgs.Load() == 2
	}, 10*time.Second, 20*time.Millisecond, "o-1 goes out again once its window has passed")
}

// When the store cannot be reached, nothing is published and the error
// matches core.ErrStoreUnavailable.
func TestPublisherFailsClosed(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: testenv.ClosedAddr(t), DialTimeout: 200 * time.Millisecond, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := redisstore.New(rdb, &redisstore.Config{SkipEvictionCheck: true})
	require.NoError(t, err)
	pub, inner, _ := onceOn(t, testenv.NewGuard(t, store, nil), nil)
	require.ErrorIs(t, pub.Publish("t", watermilltest.NewMessage("a")), core.ErrStoreUnavailable)
	require.Zero(t, inner.Calls.Load())
}

// recordingPublisher passes every Publish to a real publisher after
// recording its messages.
type recordingPublisher struct {
	message.Publisher
	record func([]*message.Message)
}

func (p *recordingPublisher) Publish(topic string, msgs ...*message.Message) error {
	p.record(msgs)
	return p.Publisher.Publish(topic, msgs...)
}

// A message whose context has ended, such as one a handler produced with its
// job's context, is published all the same.
func TestPublisherIgnoresAnEndedMessageContext(t *testing.T) {
	t.Parallel()
	pub, inner, _ := onceOn(t, testenv.MemGuard(t, nil), nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	msg := watermilltest.NewMessage("receipt")
	msg.SetContext(ctx)
	watermilltest.Publish(t, pub, "receipts", msg)
	require.EqualValues(t, 1, inner.Msgs.Load())
}
