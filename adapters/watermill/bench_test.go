package watermillonce_test

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	watermillonce "github.com/jobonce/jobonce/adapters/watermill"
	"github.com/jobonce/jobonce/adapters/watermill/internal/watermilltest"
	"github.com/jobonce/jobonce/internal/testenv"
)

// benchInFlight is how many messages the benchmark keeps in flight, as a
// broker's prefetch or a subscriber's concurrency would.
const benchInFlight = 64

// BenchmarkRouterInterleaved runs no-op messages through one Watermill
// router on GoChannel, each variant a handler of its own: plain; with the
// middleware on the test Redis, also with Config.LegacyDefaultKeys (two
// claims and two done markers a message); with the middleware on memstore, which
// shows the middleware's own cost apart from the store's; and with
// watermill's middleware.Deduplicator (in memory, one process only; it
// loses a message whose handler fails, see
// TestRouterFailedMessageIsRetriedNotLost). The variants run in
// alternating rounds of b.N/10 messages, so that all see the same load on
// a shared machine, with benchInFlight messages in flight. It reports each
// variant's msgs/s and plain's rate divided by it. Run it with a fixed
// count:
//
//	go test -run '^$' -bench RouterInterleaved -benchtime 20000x ./adapters/watermill
func BenchmarkRouterInterleaved(b *testing.B) {
	ps := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	b.Cleanup(func() { _ = ps.Close() })
	type variant struct {
		name string
		mw   message.HandlerMiddleware
		took time.Duration
	}
	variants := []variant{
		{name: "plain"},
		{name: "jobonce", mw: watermillonce.MustMiddleware(testenv.RedisGuard(b, nil), nil)},
		{name: "jobonce-legacykeys", mw: watermillonce.MustMiddleware(testenv.RedisGuard(b, nil), &watermillonce.Config{LegacyDefaultKeys: true})},
		{name: "jobonce-memstore", mw: watermillonce.MustMiddleware(testenv.MemGuard(b, nil), nil)},
		{name: "deduplicator", mw: (&middleware.Deduplicator{}).Middleware},
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
	if err != nil {
		b.Fatal(err)
	}
	f := &inFlight{slots: make(chan struct{}, benchInFlight)}
	router.AddMiddleware(f.middleware) // outermost: added before the handlers' own
	for _, v := range variants {
		h := router.AddConsumerHandler(v.name, v.name, ps, func(*message.Message) error { return nil })
		if v.mw != nil {
			h.AddMiddleware(v.mw)
		}
	}
	watermilltest.RunRouter(b, router)

	const rounds = 10
	n := max(b.N/rounds, 1)
	b.ReportAllocs()
	b.ResetTimer()
	for k := range rounds {
		for i := range variants {
			v := &variants[i]
			start := time.Now()
			f.publish(b, ps, v.name, v.name+"-"+strconv.Itoa(k)+"-", n)
			v.took += time.Since(start)
		}
	}
	b.StopTimer()
	total := float64(rounds * n)
	for _, v := range variants {
		b.ReportMetric(total/v.took.Seconds(), v.name+"-msgs/s")
		if v.mw != nil {
			b.ReportMetric(v.took.Seconds()/variants[0].took.Seconds(), "plain/"+v.name)
		}
	}
}

// inFlight bounds the messages in flight: a slot is taken before a
// message is published and given back when its handler returns.
type inFlight struct {
	slots chan struct{}
	done  sync.WaitGroup
}

func (f *inFlight) middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		defer func() {
			<-f.slots
			f.done.Done()
		}()
		return h(msg)
	}
}

// publish publishes n messages to topic, with distinct payloads under
// prefix, and waits until every one was handled.
func (f *inFlight) publish(b *testing.B, pub message.Publisher, topic, prefix string, n int) {
	f.done.Add(n)
	for i := range n {
		f.slots <- struct{}{}
		msg := message.NewMessage(watermill.NewUUID(), message.Payload(prefix+strconv.Itoa(i)))
		if err := pub.Publish(topic, msg); err != nil {
			b.Fatal(err)
		}
	}
	f.done.Wait()
}
