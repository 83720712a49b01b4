package backends_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/adapters/watermill/internal/watermilltest"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// backend is a Watermill Pub/Sub the router tests run on.
type backend struct {
	name string
	new  func(t *testing.T) env
}

// env is one test's Pub/Sub and Guard.
type env interface {
	// topic returns the name of a topic of the test's own.
	topic(name string) string
	// publisher returns a publisher.
	publisher(t *testing.T) message.Publisher
	// subscriber returns a subscriber in the consumer group group:
	// subscribers of one group share a topic's messages, and every group
	// gets every message.
	subscriber(t *testing.T, group string) message.Subscriber
	// guard returns a Guard on the backend's store, as testenv.NewGuard,
	// whose Await calls awaits counts.
	guard(t *testing.T, cfg *core.Config) *core.Guard
	// awaits returns the Await calls of the last guard's store.
	awaits() *testenv.Awaits
}

var backends = []backend{
	{"gochannel", newGoChannelEnv},
	{"redisstream", newRedisStreamEnv},
}

// goChannelEnv is watermill's in-process Pub/Sub with a memstore Guard.
// GoChannel has no consumer groups: every subscriber gets every message, so
// every subscriber is a group of its own.
type goChannelEnv struct {
	ps   *gochannel.GoChannel
	last *testenv.Awaits
}

func newGoChannelEnv(t *testing.T) env {
	ps := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	t.Cleanup(func() { _ = ps.Close() })
	return &goChannelEnv{ps: ps}
}

func (e *goChannelEnv) topic(name string) string                         { return name }
func (e *goChannelEnv) publisher(*testing.T) message.Publisher           { return e.ps }
func (e *goChannelEnv) subscriber(*testing.T, string) message.Subscriber { return e.ps }
func (e *goChannelEnv) awaits() *testenv.Awaits                          { return e.last }
func (e *goChannelEnv) guard(t *testing.T, cfg *core.Config) *core.Guard {
	e.last = testenv.NewAwaits(memstore.New())
	return testenv.NewGuard(t, e.last, cfg)
}

// redisStreamEnv is watermill-redisstream on the test Redis, with streams
// under a prefix of the test's own (deleted at cleanup) and a redisstore
// Guard under another.
type redisStreamEnv struct {
	prefix string
	opt    *redis.Options
	last   *testenv.Awaits
}

func newRedisStreamEnv(t *testing.T) env {
	prefix := testenv.Prefix(t)
	direct := testenv.Redis(t, prefix) // deletes the streams at cleanup
	return &redisStreamEnv{prefix: prefix, opt: direct.Options()}
}

func (e *redisStreamEnv) topic(name string) string { return e.prefix + name }

// client returns a client of its own: redisstream's publisher and
// subscriber close theirs when they are closed.
func (e *redisStreamEnv) client(t *testing.T) *redis.Client {
	c := redis.NewClient(e.opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (e *redisStreamEnv) publisher(t *testing.T) message.Publisher {
	p, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: e.client(t)}, watermill.NopLogger{})
	require.NoError(t, err)
	return p
}

func (e *redisStreamEnv) subscriber(t *testing.T, group string) message.Subscriber {
	return e.subscriberWith(t, redisstream.SubscriberConfig{ConsumerGroup: group})
}

// subscriberWith returns a subscriber configured by cfg, with a client of
// its own and reads that end within BlockTime.
func (e *redisStreamEnv) subscriberWith(t *testing.T, cfg redisstream.SubscriberConfig) message.Subscriber {
	cfg.Client = e.client(t)
	cfg.DisableIndefiniteInitialBlock = true
	s, err := redisstream.NewSubscriber(cfg, watermill.NopLogger{})
	require.NoError(t, err)
	return s
}

func (e *redisStreamEnv) awaits() *testenv.Awaits { return e.last }
func (e *redisStreamEnv) guard(t *testing.T, cfg *core.Config) *core.Guard {
	prefix := testenv.Prefix(t)
	store, err := redisstore.New(testenv.Redis(t, prefix), nil)
	require.NoError(t, err)
	e.last = testenv.NewAwaits(store)
	c := core.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.KeyPrefix = prefix
	return testenv.NewGuard(t, e.last, &c)
}

// route is one router's handler: the topic it consumes, and where its
// produced messages go (no publisher: a handler that produces none).
type route struct {
	handler  string
	sub      message.Subscriber
	topic    string
	pub      message.Publisher
	outTopic string
	fn       message.HandlerFunc
}

// newRouter returns a router with mws, for runRouter.
func newRouter(t *testing.T, mws ...message.HandlerMiddleware) *message.Router {
	t.Helper()
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 20 * time.Second}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddMiddleware(mws...)
	return router
}

// add adds r's handler to router.
func (r route) add(router *message.Router) {
	if r.pub == nil {
		router.AddConsumerHandler(r.handler, r.topic, r.sub, func(msg *message.Message) error {
			_, err := r.fn(msg)
			return err
		})
		return
	}
	router.AddHandler(r.handler, r.topic, r.sub, r.outTopic, r.pub, r.fn)
}

// startRouter runs a router with one handler and mws until the end of the
// test, and returns once it runs.
func startRouter(t *testing.T, r route, mws ...message.HandlerMiddleware) {
	t.Helper()
	router := newRouter(t, mws...)
	r.add(router)
	watermilltest.RunRouter(t, router)
}

// deliveries records how the router settles each delivery, from the
// message's own Acked and Nacked channels: the router acks a message only
// after publishing what its handler produced.
type deliveries struct {
	acks, nacks atomic.Int64
	acked       chan string // the UUID of each acknowledged message
	stop        chan struct{}
}

func newDeliveries(t *testing.T) *deliveries {
	d := &deliveries{acked: make(chan string, 100), stop: make(chan struct{})}
	t.Cleanup(func() { close(d.stop) })
	return d
}

// middleware is the outermost middleware, so that it sees every delivery.
func (d *deliveries) middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		go func() {
			select {
			case <-msg.Acked():
				d.acks.Add(1)
				d.acked <- msg.UUID
			case <-msg.Nacked():
				d.nacks.Add(1)
			case <-d.stop:
			}
		}()
		return h(msg)
	}
}

// waitAcked waits until n more messages have been acknowledged and returns
// their UUIDs.
func (d *deliveries) waitAcked(t *testing.T, n int) []string {
	t.Helper()
	var uuids []string
	timeout := time.After(30 * time.Second)
	for range n {
		select {
		case id := <-d.acked:
			uuids = append(uuids, id)
		case <-timeout:
			t.Fatalf("%d of %d messages acknowledged in time (%d nacks)", len(uuids), n, d.nacks.Load())
		}
	}
	return uuids
}
