package backends_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/internal/testenv"
)

// crashGroup is the consumer group (Redis Streams) or durable queue group
// (JetStream) the worker processes share.
const crashGroup = "consumers"

// How soon each backend hands a dead worker's messages to the others.
const (
	// redisMaxIdle is how long a message may stay pending with one consumer
	// before another claims it (XPENDING, then XCLAIM).
	redisMaxIdle       = 2 * time.Second
	redisClaimInterval = 250 * time.Millisecond
	// natsAckWait is how long JetStream waits for an ack before it
	// redelivers; natsMaxAckPending bounds the messages in flight.
	natsAckWait       = 3 * time.Second
	natsMaxAckPending = 100
)

// crashBackend is a Watermill Pub/Sub the crash tests run on.
type crashBackend struct {
	name  string
	label string
	// topic returns a topic name of the test's own, from its key prefix.
	topic func(prefix string) string
	// prepare creates topic and its consumer group, deleted at cleanup,
	// and returns a publisher and a probe that reports whether the broker
	// holds no message that is waiting or unacknowledged, and what it
	// holds.
	prepare func(t *testing.T, topic string) (message.Publisher, brokerProbe)
	// subscriber returns a worker process's subscriber: spec.Handlers
	// concurrent subscriptions in the group.
	subscriber func(t *testing.T, spec crashSpec) message.Subscriber
}

// brokerProbe reports whether a broker holds no message that is waiting or
// unacknowledged, and what it holds.
type brokerProbe func(context.Context) (idle bool, state string, err error)

var crashBackends = []crashBackend{redisStreamCrash, rabbitMQCrash, natsCrash}

// crashBackendNamed returns the backend called name.
func crashBackendNamed(t *testing.T, name string) crashBackend {
	for _, b := range crashBackends {
		if b.name == name {
			return b
		}
	}
	t.Fatalf("no crash backend %q", name)
	return crashBackend{}
}

// Redis Streams (watermill-redisstream): every handler of a worker is a
// consumer of the group with a name of its own, since a subscriber takes
// its next message only once the last is acknowledged. A consumer's
// pending messages idle for redisMaxIdle are claimed by another.
var redisStreamCrash = crashBackend{
	name: "redisstream", label: "Redis Streams (watermill-redisstream)",
	topic: func(prefix string) string { return prefix + "jobs" },
	prepare: func(t *testing.T, topic string) (message.Publisher, brokerProbe) {
		rdb := testenv.Redis(t, "")
		ctx := context.Background()
		require.NoError(t, rdb.XGroupCreateMkStream(ctx, topic, crashGroup, "0").Err())
		return &pipelinedPublisher{rdb: rdb}, func(ctx context.Context) (bool, string, error) {
			groups, err := rdb.XInfoGroups(ctx, topic).Result()
			if err != nil {
				return false, "", err
			}
			n, err := rdb.XLen(ctx, topic).Result()
			if err != nil {
				return false, "", err
			}
			for _, g := range groups {
				if g.Name == crashGroup {
					pending, _ := rdb.XPending(ctx, topic, crashGroup).Result()
					return g.Pending == 0 && g.EntriesRead == n,
						fmt.Sprintf("%d of %d entries read, %d pending %v", g.EntriesRead, n, g.Pending, pending), nil
				}
			}
			return false, "", fmt.Errorf("no group %s on %s", crashGroup, topic)
		}
	},
	subscriber: func(t *testing.T, spec crashSpec) message.Subscriber {
		opt, err := redis.ParseURL(testenv.RedisURL())
		require.NoError(t, err)
		opt.PoolSize = 4
		var subs fanIn
		for i := range spec.Handlers {
			s, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
				Client:                        redis.NewClient(opt), // closed by the subscriber
				ConsumerGroup:                 crashGroup,
				Consumer:                      fmt.Sprintf("w%d-%02d", spec.Worker, i),
				MaxIdleTime:                   redisMaxIdle,
				ClaimInterval:                 redisClaimInterval,
				DisableIndefiniteInitialBlock: true,
			}, watermill.NopLogger{})
			require.NoError(t, err)
			subs = append(subs, s)
		}
		return subs
	},
}

// pipelinedPublisher publishes to Redis Streams what watermill-redisstream's
// publisher would, in the same order, in one pipeline rather than one round
// trip per message, so that publishing a test's thousands of messages takes
// milliseconds.
type pipelinedPublisher struct{ rdb *redis.Client }

func (p *pipelinedPublisher) Publish(topic string, msgs ...*message.Message) error {
	pipe := p.rdb.Pipeline()
	for _, msg := range msgs {
		values, err := redisstream.DefaultMarshallerUnmarshaller{}.Marshal(topic, msg)
		if err != nil {
			return err
		}
		pipe.XAdd(context.Background(), &redis.XAddArgs{Stream: topic, Values: values})
	}
	_, err := pipe.Exec(context.Background())
	return err
}

func (p *pipelinedPublisher) Close() error { return nil }

// RabbitMQ (watermill-amqp): a durable queue; each handler is a
// subscription of its own (a channel with a prefetch of one). A dead
// worker's unacknowledged messages are requeued when its connection
// drops.
var rabbitMQCrash = crashBackend{
	name: "rabbitmq", label: "RabbitMQ (watermill-amqp)",
	topic: func(string) string { return "jobonce-crash-" + testenv.RandomID(6) },
	prepare: func(t *testing.T, topic string) (message.Publisher, brokerProbe) {
		conn, err := amqp091.Dial(testenv.AMQPURL())
		if err != nil {
			t.Fatalf("RabbitMQ at %s does not answer (start it with scripts/test.sh): %v", testenv.AMQPURL(), err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		ch, err := conn.Channel()
		require.NoError(t, err)
		cfg := amqp.NewDurableQueueConfig(testenv.AMQPURL())
		sub, err := amqp.NewSubscriber(cfg, watermill.NopLogger{})
		require.NoError(t, err)
		require.NoError(t, sub.SubscribeInitialize(topic)) // the queue, before anything is published to it
		require.NoError(t, sub.Close())
		t.Cleanup(func() { _, _ = ch.QueueDelete(topic, false, false, false) })
		pub, err := amqp.NewPublisher(cfg, watermill.NopLogger{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = pub.Close() })
		return pub, func(context.Context) (bool, string, error) {
			// Messages counts those ready only: unacknowledged ones in the
			// survivors are copies of acknowledged messages (see runCrash).
			q, err := ch.QueueDeclarePassive(topic, true, false, false, false, nil)
			return err == nil && q.Messages == 0, fmt.Sprintf("%d messages ready, %d consumers", q.Messages, q.Consumers), err
		}
	},
	subscriber: func(t *testing.T, spec crashSpec) message.Subscriber {
		s, err := amqp.NewSubscriber(amqp.NewDurableQueueConfig(testenv.AMQPURL()), watermill.NopLogger{})
		require.NoError(t, err)
		subs := make(fanIn, spec.Handlers)
		for i := range subs {
			subs[i] = s
		}
		return subs
	},
}

// NATS JetStream (watermill-nats): a stream and a durable push consumer
// with a deliver group, made before the workers bind to it with
// SubscribersCount handlers each. A dead worker's unacknowledged messages
// are redelivered after natsAckWait.
var natsCrash = crashBackend{
	name: "nats", label: "NATS JetStream (watermill-nats)",
	topic: func(string) string { return "jobonce_crash_" + testenv.RandomID(6) },
	prepare: func(t *testing.T, topic string) (message.Publisher, brokerProbe) {
		nc, err := nats.Connect(testenv.NATSURL())
		if err != nil {
			t.Fatalf("NATS at %s does not answer (start it with scripts/test.sh): %v", testenv.NATSURL(), err)
		}
		t.Cleanup(nc.Close)
		js, err := nc.JetStream()
		require.NoError(t, err)
		_, err = js.AddStream(&nats.StreamConfig{Name: topic, Subjects: []string{topic}})
		require.NoError(t, err, "JetStream (nats-server -js)")
		t.Cleanup(func() { _ = js.DeleteStream(topic) })
		_, err = js.AddConsumer(topic, &nats.ConsumerConfig{
			Durable: crashGroup, DeliverGroup: crashGroup, DeliverSubject: nats.NewInbox(),
			DeliverPolicy: nats.DeliverAllPolicy, AckPolicy: nats.AckExplicitPolicy,
			AckWait: natsAckWait, MaxAckPending: natsMaxAckPending,
		})
		require.NoError(t, err)
		pub, err := wmnats.NewPublisher(wmnats.PublisherConfig{URL: testenv.NATSURL()}, watermill.NopLogger{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = pub.Close() })
		return pub, func(context.Context) (bool, string, error) {
			info, err := js.ConsumerInfo(topic, crashGroup)
			if err != nil {
				return false, "", err
			}
			return info.NumPending == 0 && info.NumAckPending == 0,
				fmt.Sprintf("%d pending, %d unacknowledged, %d redelivered", info.NumPending, info.NumAckPending, info.NumRedelivered), nil
		}
	},
	subscriber: func(t *testing.T, spec crashSpec) message.Subscriber {
		s, err := wmnats.NewSubscriber(wmnats.SubscriberConfig{
			URL:              testenv.NATSURL(),
			QueueGroupPrefix: crashGroup,
			SubscribersCount: spec.Handlers,
			CloseTimeout:     10 * time.Second,
			JetStream: wmnats.JetStreamConfig{
				DurablePrefix: crashGroup,
				SubscribeOptions: []nats.SubOpt{
					nats.DeliverAll(), nats.AckExplicit(), nats.AckWait(natsAckWait), nats.MaxAckPending(natsMaxAckPending),
				},
			},
		}, watermill.NopLogger{})
		require.NoError(t, err)
		return s
	},
}

// fanIn is a subscriber whose subscription merges one subscription of
// each of its subscribers (a subscriber listed n times is subscribed n
// times), so that one router handler runs that many messages at once.
type fanIn []message.Subscriber

func (f fanIn) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	out := make(chan *message.Message)
	var wg sync.WaitGroup
	for _, s := range f {
		ch, err := s.Subscribe(ctx, topic)
		if err != nil {
			return nil, err
		}
		wg.Go(func() {
			for m := range ch {
				select {
				case out <- m:
				case <-ctx.Done():
					return
				}
			}
		})
	}
	go func() {
		wg.Wait()
		close(out)
	}()
	return out, nil
}

// Close closes each subscriber once.
func (f fanIn) Close() error {
	var errs []error
	closed := map[message.Subscriber]bool{}
	for _, s := range f {
		if !closed[s] {
			closed[s] = true
			errs = append(errs, s.Close())
		}
	}
	return errors.Join(errs...)
}
