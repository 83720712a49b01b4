package watermillonce_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	watermillonce "github.com/jobonce/jobonce/adapters/watermill"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// onceOn returns a publisher that publishes through a new GoChannel once per
// key, the counter of what reaches the GoChannel, and the GoChannel.
func onceOn(t *testing.T, g *core.Guard, cfg *watermillonce.PublisherConfig) (message.Publisher, *countingPublisher, *gochannel.GoChannel) {
	t.Helper()
	ps := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	t.Cleanup(func() { _ = ps.Close() })
	inner := &countingPublisher{Publisher: ps}
	pub, err := watermillonce.NewPublisher(g, inner, cfg)
	require.NoError(t, err)
	return pub, inner, ps
}

// A retried Publish reuses the message's UUID: it is published once per
// topic. Another UUID, or another topic, is published.
func TestPublisherPublishesEachUUIDOnce(t *testing.T) {
	t.Parallel()
	pub, inner, ps := onceOn(t, testenv.MemGuard(t, nil), nil)
	got := subscribe(t, ps, "orders")
	msg := newMessage("ship order 1")
	publish(t, pub, "orders", msg)
	publish(t, pub, "orders", msg) // a retry after an error that was not one
	require.EqualValues(t, 1, inner.msgs.Load())
	require.Equal(t, msg.UUID, got.wait(t, 1)[0].UUID)

	publish(t, pub, "audit", msg)
	publish(t, pub, "orders", newMessage("ship order 1"))
	require.EqualValues(t, 3, inner.msgs.Load(), "another topic, another UUID")
	require.Len(t, got.wait(t, 2), 2)
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
	a, b, c := newMessage("a"), newMessage("b"), newMessage("c")
	publish(t, pub, "t", a)
	publish(t, pub, "t", b, a, b, c)
	require.Equal(t, [][]string{{a.UUID}, {b.UUID}, {c.UUID}}, calls, "a was published before, b goes out once")

	publish(t, pub, "t", a, b, c)
	require.Len(t, calls, 3, "nothing left to publish: no call")
}

// When publishing fails, the failed message's claim is released and the
// error comes back unchanged: the retry publishes every message.
func TestPublisherFailureReleasesTheKeys(t *testing.T) {
	t.Parallel()
	ps := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	t.Cleanup(func() { _ = ps.Close() })
	boom := errors.New("broker unreachable")
	flaky := &flakyPublisher{Publisher: ps, err: boom}
	flaky.fails.Store(1)
	pub, err := watermillonce.NewPublisher(testenv.MemGuard(t, nil), flaky, nil)
	require.NoError(t, err)
	a, b := newMessage("a"), newMessage("b")
	require.Same(t, boom, pub.Publish("t", a, b))
	publish(t, pub, "t", a, b)
	require.EqualValues(t, 2, flaky.published.Load(), "both went out on the retry")
	publish(t, pub, "t", a, b)
	require.EqualValues(t, 2, flaky.published.Load())
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
		m := newMessage("ship")
		m.Metadata.Set("order_id", id)
		return m
	}
	publish(t, pub, "orders", order("o-1"))
	publish(t, pub, "orders", order("o-1"))
	require.EqualValues(t, 1, inner.msgs.Load(), "another UUID, one order")

	err := pub.Publish("orders", order("o-2"), newMessage("no order id"))
	require.ErrorIs(t, err, core.ErrInvalidKey)
	require.ErrorContains(t, err, "PublisherConfig.Key returned an empty key")
	require.EqualValues(t, 1, inner.msgs.Load(), "nothing of the call was published")

	require.Eventually(t, func() bool {
		publish(t, pub, "orders", order("o-1"))
		return inner.msgs.Load() == 2
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
	require.ErrorIs(t, pub.Publish("t", newMessage("a")), core.ErrStoreUnavailable)
	require.Zero(t, inner.calls.Load())
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

// flakyPublisher fails its first fails calls with err, then passes every
// Publish to a real publisher and counts the messages it published.
type flakyPublisher struct {
	message.Publisher
	err       error
	fails     atomic.Int64
	published atomic.Int64
}

func (p *flakyPublisher) Publish(topic string, msgs ...*message.Message) error {
	if p.fails.Add(-1) >= 0 {
		return p.err
	}
	p.published.Add(int64(len(msgs)))
	return p.Publisher.Publish(topic, msgs...)
}

// A message whose context has ended, such as one a handler produced with its
// job's context, is published all the same.
func TestPublisherIgnoresAnEndedMessageContext(t *testing.T) {
	t.Parallel()
	pub, inner, _ := onceOn(t, testenv.MemGuard(t, nil), nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	msg := newMessage("receipt")
	msg.SetContext(ctx)
	publish(t, pub, "receipts", msg)
	require.EqualValues(t, 1, inner.msgs.Load())
}

// failOnce is redisstream's marshaller, failing the first marshal of the
// message whose UUID is uuid, as a publish that fails part-way through a
// call does.
type failOnce struct {
	redisstream.DefaultMarshallerUnmarshaller
	uuid   string
	failed atomic.Bool
}

func (m *failOnce) Marshal(topic string, msg *message.Message) (map[string]any, error) {
	if msg.UUID == m.uuid && m.failed.CompareAndSwap(false, true) {
		return nil, errors.New("cannot marshal")
	}
	return m.DefaultMarshallerUnmarshaller.Marshal(topic, msg)
}

// redisstream publishes a call's messages one by one and stops at the first
// error, so the messages before it went out. A Publish that fails on its
// second message, then a retry of the call: each message is in the stream
// once.
func TestPublisherRetryAfterAPartialPublishPublishesEachMessageOnce(t *testing.T) {
	t.Parallel()
	e := newRedisStreamEnv(t).(*redisStreamEnv)
	m1, m2, m3 := newMessage("1"), newMessage("2"), newMessage("3")
	rs, err := redisstream.NewPublisher(redisstream.PublisherConfig{
		Client: e.client(t), Marshaller: &failOnce{uuid: m2.UUID},
	}, watermill.NopLogger{})
	require.NoError(t, err)
	pub, err := watermillonce.NewPublisher(e.guard(t, nil), rs, nil)
	require.NoError(t, err)
	topic := e.topic("receipts")
	require.ErrorContains(t, pub.Publish(topic, m1, m2, m3), "cannot marshal")
	publish(t, pub, topic, m1, m2, m3) // the caller's retry

	entries, err := e.client(t).XRange(context.Background(), topic, "-", "+").Result()
	require.NoError(t, err)
	var uuids []string
	for _, x := range entries {
		uuids = append(uuids, x.Values[redisstream.UUIDHeaderKey].(string))
	}
	require.Equal(t, []string{m1.UUID, m2.UUID, m3.UUID}, uuids, "each message once, in order")
}
