package backends_test

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/stretchr/testify/require"

	watermillonce "github.com/jobonce/jobonce/adapters/watermill"
	"github.com/jobonce/jobonce/adapters/watermill/internal/watermilltest"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/testenv"
)

// These tests run real Watermill routers on each backend.

// One message delivered to two routers at once (two consumer groups, or two
// GoChannel subscribers, each getting every message) under one handler
// name: the handler runs once; the other copy waits for it and is
// acknowledged as a duplicate.
func TestRouterCopiesDeliveredTogetherRunOnce(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e := b.new(t)
			var outs testenv.Outcomes
			g := e.guard(t, &core.Config{Observer: outs.Observe})
			topic := e.topic("welcome")
			var runs atomic.Int64
			started, release := make(chan struct{}), make(chan struct{})
			acked := newDeliveries(t)
			for _, group := range []string{"a", "b"} {
				startRouter(t, route{handler: "welcome", sub: e.subscriber(t, group), topic: topic, fn: watermilltest.Blocking(&runs, started, release)},
					acked.middleware, watermillonce.MustMiddleware(g, nil))
			}
			watermilltest.Publish(t, e.publisher(t), topic, watermilltest.NewMessage("user-42"))
			<-started
			e.awaits().Began(t, 1) // the second copy found the job running and waits
			close(release)
			acked.waitAcked(t, 2)
			require.EqualValues(t, 1, runs.Load())
			require.EqualValues(t, 1, outs.Get(core.Ran))
			require.EqualValues(t, 1, outs.Get(core.Duplicate))
			require.Zero(t, acked.nacks.Load(), "the copy waited rather than being nacked")
			for _, ev := range outs.Events() {
				require.Equal(t, "7:welcome:"+strconv.Itoa(len(topic))+":"+topic+":"+core.Fingerprint([]byte("user-42")), ev.Key,
					"the handler's name, the topic and the payload's fingerprint")
				require.Equal(t, "welcome", ev.Kind)
			}
		})
	}
}

// Each message's first attempt fails and is nacked. Under the middleware
// the redelivery runs; under watermill's Deduplicator, which records the
// message before its handler runs, the redelivery is dropped as a
// duplicate and acknowledged: the message is lost.
func TestRouterFailedMessageIsRetriedNotLost(t *testing.T) {
	t.Parallel()
	const messages = 20
	for _, b := range backends {
		for _, guard := range []string{"jobonce", "Deduplicator"} {
			t.Run(b.name+"/"+guard, func(t *testing.T) {
				t.Parallel()
				e := b.new(t)
				mw := message.HandlerMiddleware((&middleware.Deduplicator{}).Middleware)
				if guard == "jobonce" {
					mw = watermillonce.MustMiddleware(e.guard(t, nil), nil)
				}
				var mu sync.Mutex
				attempts := map[string]int{}
				var succeeded atomic.Int64
				topic := e.topic("charge")
				acked := newDeliveries(t)
				startRouter(t, route{handler: "charge", sub: e.subscriber(t, "g"), topic: topic, fn: func(msg *message.Message) ([]*message.Message, error) {
					mu.Lock()
					attempts[string(msg.Payload)]++
					n := attempts[string(msg.Payload)]
					mu.Unlock()
					if n == 1 {
						return nil, errors.New("the payment provider timed out")
					}
					succeeded.Add(1)
					return nil, nil
				}}, acked.middleware, mw)
				pub := e.publisher(t)
				for i := range messages {
					watermilltest.Publish(t, pub, topic, watermilltest.NewMessage(fmt.Sprintf("order-%d", i)))
				}
				acked.waitAcked(t, messages)
				testenv.Report(t, "%s on %s: %d of %d messages ran after their first attempt failed; %d were acknowledged without running (lost)", guard, b.name, succeeded.Load(), messages, messages-succeeded.Load())
				require.Eventually(t, func() bool { return acked.nacks.Load() == messages }, 10*time.Second, time.Millisecond,
					"every first attempt was nacked")
				if guard == "jobonce" {
					require.EqualValues(t, messages, succeeded.Load(), "every message ran on its redelivery")
				} else {
					require.Zero(t, succeeded.Load(), "the Deduplicator drops every redelivery")
				}
			})
		}
	}
}

// A different payload under a key that is done, and a message with an empty
// key, go to the poison queue through PoisonQueueWithFilter and IsPoison,
// and are acknowledged on their own topic; the handler does not run for
// them.
func TestRouterConflictGoesToThePoisonQueue(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e := b.new(t)
			topic, poisonTopic := e.topic("orders"), e.topic("poison")
			poisoned := watermilltest.Subscribe(t, e.subscriber(t, "poison-reader"), poisonTopic)
			pq, err := middleware.PoisonQueueWithFilter(e.publisher(t), poisonTopic, watermillonce.IsPoison)
			require.NoError(t, err)
			var runs atomic.Int64
			acked := newDeliveries(t)
			startRouter(t, route{handler: "orders", sub: e.subscriber(t, "g"), topic: topic, fn: func(*message.Message) ([]*message.Message, error) {
				runs.Add(1)
				return nil, nil
			}}, acked.middleware, pq, watermillonce.MustMiddleware(e.guard(t, nil), watermilltest.KeyByID))

			pub := e.publisher(t)
			first, conflict, unkeyed := watermilltest.NewMessage("10 EUR"), watermilltest.NewMessage("99 EUR"), watermilltest.NewMessage("5 EUR")
			first.Metadata.Set("id", "o-7")
			conflict.Metadata.Set("id", "o-7")
			watermilltest.Publish(t, pub, topic, first)
			acked.waitAcked(t, 1)
			watermilltest.Publish(t, pub, topic, conflict, unkeyed)
			acked.waitAcked(t, 2)

			reasons := map[string]string{}
			for _, m := range poisoned.Wait(t, 2) {
				reasons[m.UUID] = m.Metadata.Get(middleware.ReasonForPoisonedKey)
				require.Equal(t, "orders", m.Metadata.Get(middleware.PoisonedHandlerKey))
			}
			require.Len(t, reasons, 2)
			require.Contains(t, reasons[conflict.UUID], core.ErrConflict.Error())
			require.Contains(t, reasons[unkeyed.UUID], core.ErrInvalidKey.Error())
			require.EqualValues(t, 1, runs.Load())
			require.Zero(t, acked.nacks.Load())
		})
	}
}

// The order the package documentation recommends: CorrelationID,
// PoisonQueueWithFilter, the middleware, Timeout, Retry, Recoverer, and the router's
// publisher decorated with NewPublisher. A handler that panics, then fails,
// then succeeds is retried under one claim (one fence) and runs once; its
// produced message goes out once, with the correlation ID; a later copy of
// the message is a duplicate whose produced message the decorated publisher
// does not publish again.
func TestRouterRecommendedOrder(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e := b.new(t)
			var outs testenv.Outcomes
			g := e.guard(t, &core.Config{Observer: outs.Observe})
			topic, outTopic, poisonTopic := e.topic("payments"), e.topic("receipts"), e.topic("poison")
			receipts := watermilltest.Subscribe(t, e.subscriber(t, "receipts-reader"), outTopic)
			pq, err := middleware.PoisonQueueWithFilter(e.publisher(t), poisonTopic, watermillonce.IsPoison)
			require.NoError(t, err)
			acked := newDeliveries(t)
			router := newRouter(t,
				acked.middleware,
				middleware.CorrelationID,
				pq,
				watermillonce.MustMiddleware(g, nil),
				middleware.Timeout(time.Minute),
				middleware.Retry{MaxRetries: 3, InitialInterval: time.Millisecond}.Middleware,
				middleware.Recoverer,
			)
			out := &watermilltest.CountingPublisher{Publisher: e.publisher(t)}
			returned := &watermilltest.CountingPublisher{} // what the handler chain returned, before NewPublisher
			router.AddPublisherDecorators(
				func(pub message.Publisher) (message.Publisher, error) { returned.Publisher = pub; return returned, nil },
				func(pub message.Publisher) (message.Publisher, error) { return watermillonce.NewPublisher(g, pub, nil) },
			)
			var mu sync.Mutex
			var fences []int64
			route{handler: "payments", sub: e.subscriber(t, "g"), topic: topic, pub: out, outTopic: outTopic,
				fn: func(msg *message.Message) ([]*message.Message, error) {
					fence, ok := core.Fence(msg.Context())
					require.True(t, ok)
					mu.Lock()
					fences = append(fences, fence)
					n := len(fences)
					mu.Unlock()
					switch n {
					case 1:
						panic("the first attempt panics")
					case 2:
						return nil, errors.New("the second attempt fails")
					}
					return []*message.Message{watermilltest.NewMessage("receipt")}, nil
				}}.add(router)
			watermilltest.RunRouter(t, router)

			pub := e.publisher(t)
			in := watermilltest.NewMessage("pay 10 EUR")
			middleware.SetCorrelationID("c-1", in)
			watermilltest.Publish(t, pub, topic, in)
			acked.waitAcked(t, 1)
			watermilltest.Publish(t, pub, topic, watermilltest.NewMessage("pay 10 EUR"))
			acked.waitAcked(t, 1)

			require.Len(t, fences, 3, "three attempts")
			require.Len(t, slices.Compact(slices.Clone(fences)), 1, "every attempt ran under one claim: %v", fences)
			require.EqualValues(t, 1, outs.Get(core.Ran))
			require.Zero(t, outs.Get(core.Failed), "Retry inside the middleware: its failures never release the claim")
			require.EqualValues(t, 1, outs.Get(core.Duplicate))
			require.Zero(t, acked.nacks.Load())
			require.EqualValues(t, 2, returned.Msgs.Load(), "the run and the duplicate returned the produced message")
			require.EqualValues(t, 1, out.Msgs.Load(), "the duplicate's produced message was not published again")
			got := receipts.Wait(t, 1)
			require.Equal(t, "receipt", string(got[0].Payload))
			require.Equal(t, "c-1", middleware.MessageCorrelationID(got[0]))
		})
	}
}

// A message consumed by two handlers, keyed by its UUID: each handler runs
// it once, under a key of its own.
func TestRouterEachHandlerRunsAMessageOnce(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e := b.new(t)
			var outs testenv.Outcomes
			cfg := &watermillonce.Config{Key: func(m *message.Message) string { return m.UUID }}
			acked := newDeliveries(t)
			router := newRouter(t, acked.middleware, watermillonce.MustMiddleware(e.guard(t, &core.Config{Observer: outs.Observe}), cfg))
			topic := e.topic("signups")
			var mu sync.Mutex
			runs := map[string]int{}
			for _, name := range []string{"email", "stats"} {
				route{handler: name, sub: e.subscriber(t, name), topic: topic, fn: func(msg *message.Message) ([]*message.Message, error) {
					mu.Lock()
					defer mu.Unlock()
					runs[message.HandlerNameFromCtx(msg.Context())]++
					return nil, nil
				}}.add(router)
			}
			watermilltest.RunRouter(t, router)
			msg := watermilltest.NewMessage("user-42")
			pub := e.publisher(t)
			watermilltest.Publish(t, pub, topic, msg)
			acked.waitAcked(t, 2)
			watermilltest.Publish(t, pub, topic, msg) // the same UUID again
			acked.waitAcked(t, 2)
			mu.Lock()
			require.Equal(t, map[string]int{"email": 1, "stats": 1}, runs)
			mu.Unlock()
			require.EqualValues(t, 2, outs.Get(core.Duplicate))
			keys := map[string]bool{}
			for _, ev := range outs.Events() {
				keys[ev.Key] = true
			}
			require.Equal(t, map[string]bool{"5:email:" + msg.UUID: true, "5:stats:" + msg.UUID: true}, keys)
		})
	}
}

// TestRouterHandlersWhoseNameAndKeyJoinAlikeKeepKeysApart: handler
// "billing" keying a message "invoice:42" and handler "billing:invoice"
// keying it "42" name two effects; joined with a bare ":" both would be
// "billing:invoice:42", and the second handler's message would be taken for
// a conflict (poisoned) or a duplicate (skipped).
func TestRouterHandlersWhoseNameAndKeyJoinAlikeKeepKeysApart(t *testing.T) {
	t.Parallel()
	e := backends[0].new(t)
	var outs testenv.Outcomes
	keys := map[string]string{"billing": "invoice:42", "billing:invoice": "42"}
	cfg := &watermillonce.Config{Key: func(m *message.Message) string {
		return keys[message.HandlerNameFromCtx(m.Context())]
	}}
	acked := newDeliveries(t)
	router := newRouter(t, acked.middleware, watermillonce.MustMiddleware(e.guard(t, &core.Config{Observer: outs.Observe}), cfg))
	topic := e.topic("orders")
	var mu sync.Mutex
	runs := map[string]int{}
	for name := range keys {
		route{handler: name, sub: e.subscriber(t, name), topic: topic, fn: func(msg *message.Message) ([]*message.Message, error) {
			mu.Lock()
			defer mu.Unlock()
			runs[message.HandlerNameFromCtx(msg.Context())]++
			return nil, nil
		}}.add(router)
	}
	watermilltest.RunRouter(t, router)
	watermilltest.Publish(t, e.publisher(t), topic, watermilltest.NewMessage("order"))
	acked.waitAcked(t, 2)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string]int{"billing": 1, "billing:invoice": 1}, runs)
	require.EqualValues(t, 2, outs.Get(core.Ran))
}

// A run whose produced messages are over the Guard's MaxResultSize, whose
// publish then fails: the redelivery is a duplicate that cannot return
// them, so it goes to the poison queue with the reason, rather than being
// acknowledged without them.
func TestRouterDuplicateWhoseProducedMessagesWereNotStoredIsPoisoned(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e := b.new(t)
			topic, outTopic, poisonTopic := e.topic("reports"), e.topic("pages"), e.topic("poison")
			poisoned := watermilltest.Subscribe(t, e.subscriber(t, "poison-reader"), poisonTopic)
			pq, err := middleware.PoisonQueueWithFilter(e.publisher(t), poisonTopic, watermillonce.IsPoison)
			require.NoError(t, err)
			out := &watermilltest.FlakyPublisher{Publisher: e.publisher(t), Err: errors.New("broker unreachable")}
			out.Fails.Store(1)
			var runs atomic.Int64
			acked := newDeliveries(t)
			startRouter(t, route{handler: "reports", sub: e.subscriber(t, "g"), topic: topic, pub: out, outTopic: outTopic,
				fn: func(*message.Message) ([]*message.Message, error) {
					runs.Add(1)
					pages := make([]*message.Message, 100)
					for i := range pages {
						pages[i] = watermilltest.NewMessage(strings.Repeat("x", 1024))
					}
					return pages, nil
				}}, acked.middleware, pq, watermillonce.MustMiddleware(e.guard(t, nil), nil))
			in := watermilltest.NewMessage("monthly report")
			watermilltest.Publish(t, e.publisher(t), topic, in)
			got := poisoned.Wait(t, 1)
			require.Equal(t, in.UUID, got[0].UUID)
			require.Contains(t, got[0].Metadata.Get(middleware.ReasonForPoisonedKey), watermillonce.ErrProducedNotStored.Error())
			require.EqualValues(t, 1, runs.Load())
			require.Zero(t, out.Published.Load(), "the run's publish failed, and the duplicate had nothing to publish")
		})
	}
}

// Handler names are unique within one router only. Two routers sharing a
// Guard, each with a handler "process", one on "orders" and one on
// "refunds": a message of the same payload on each topic runs each handler
// once; the default key names the topic.
func TestRouterHandlersOfOneNameOnTwoTopicsEachRun(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e := b.new(t)
			var outs testenv.Outcomes
			mw := watermillonce.MustMiddleware(e.guard(t, &core.Config{Observer: outs.Observe}), nil)
			var mu sync.Mutex
			runs := map[string]int{}
			acked := newDeliveries(t)
			for _, name := range []string{"orders", "refunds"} {
				topic := e.topic(name)
				startRouter(t, route{handler: "process", sub: e.subscriber(t, "g"), topic: topic, fn: func(msg *message.Message) ([]*message.Message, error) {
					mu.Lock()
					defer mu.Unlock()
					runs[message.SubscribeTopicFromCtx(msg.Context())]++
					return nil, nil
				}}, acked.middleware, mw)
			}
			pub := e.publisher(t)
			watermilltest.Publish(t, pub, e.topic("orders"), watermilltest.NewMessage(`{"id": 7}`))
			acked.waitAcked(t, 1)
			watermilltest.Publish(t, pub, e.topic("refunds"), watermilltest.NewMessage(`{"id": 7}`))
			acked.waitAcked(t, 1)
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, map[string]int{e.topic("orders"): 1, e.topic("refunds"): 1}, runs)
			require.EqualValues(t, 2, outs.Get(core.Ran))
			require.Zero(t, outs.Get(core.Duplicate))
		})
	}
}
