package backends_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	watermillonce "github.com/jobonce/jobonce/adapters/watermill"
	"github.com/jobonce/jobonce/adapters/watermill/internal/watermilltest"
)

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
	m1, m2, m3 := watermilltest.NewMessage("1"), watermilltest.NewMessage("2"), watermilltest.NewMessage("3")
	rs, err := redisstream.NewPublisher(redisstream.PublisherConfig{
		Client: e.client(t), Marshaller: &failOnce{uuid: m2.UUID},
	}, watermill.NopLogger{})
	require.NoError(t, err)
	pub, err := watermillonce.NewPublisher(e.guard(t, nil), rs, nil)
	require.NoError(t, err)
	topic := e.topic("receipts")
	require.ErrorContains(t, pub.Publish(topic, m1, m2, m3), "cannot marshal")
	watermilltest.Publish(t, pub, topic, m1, m2, m3) // the caller's retry

	entries, err := e.client(t).XRange(context.Background(), topic, "-", "+").Result()
	require.NoError(t, err)
	var uuids []string
	for _, x := range entries {
		uuids = append(uuids, x.Values[redisstream.UUIDHeaderKey].(string))
	}
	require.Equal(t, []string{m1.UUID, m2.UUID, m3.UUID}, uuids, "each message once, in order")
}
