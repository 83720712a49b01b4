package backends_test

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	watermillonce "github.com/jobonce/jobonce/adapters/watermill"
	"github.com/jobonce/jobonce/adapters/watermill/internal/watermilltest"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/testenv"
)

// TestDefaultKeyIsTheKeyTheMiddlewareClaims: on real routers on each
// backend, the key the middleware claims for each message (the Guard's
// Event.Key) is DefaultKey of the message, the handler's name and the topic
// it subscribed to: two handlers on one topic and a third on another.
func TestDefaultKeyIsTheKeyTheMiddlewareClaims(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e := b.new(t)
			var outs testenv.Outcomes
			g := e.guard(t, &core.Config{Observer: outs.Observe})
			orders, refunds := e.topic("orders"), e.topic("refunds")
			var mu sync.Mutex
			var want []string
			record := func(handler, topic string) message.HandlerFunc {
				return func(msg *message.Message) ([]*message.Message, error) {
					mu.Lock()
					defer mu.Unlock()
					want = append(want, watermillonce.DefaultKey(msg, handler, topic))
					return nil, nil
				}
			}
			router := newRouter(t, watermillonce.MustMiddleware(g, nil))
			for _, r := range []route{
				{handler: "ship", topic: orders, sub: e.subscriber(t, "ship"), fn: record("ship", orders)},
				{handler: "audit", topic: orders, sub: e.subscriber(t, "audit"), fn: record("audit", orders)},
				{handler: "ship-refund", topic: refunds, sub: e.subscriber(t, "ship-refund"), fn: record("ship-refund", refunds)},
			} {
				r.add(router)
			}
			watermilltest.RunRouter(t, router)
			watermilltest.Publish(t, e.publisher(t), orders, watermilltest.NewMessage(`{"order": 1}`), watermilltest.NewMessage(`{"order": 2}`))
			watermilltest.Publish(t, e.publisher(t), refunds, watermilltest.NewMessage(`{"order": 1}`))

			const runs = 5 // two messages to two handlers, one to the third
			require.Eventually(t, func() bool { return outs.Get(core.Ran) == runs }, time.Minute, 10*time.Millisecond)
			var claimed []string
			for _, ev := range outs.Events() {
				require.Equal(t, core.Ran, ev.Outcome)
				claimed = append(claimed, ev.Key)
			}
			mu.Lock()
			defer mu.Unlock()
			require.ElementsMatch(t, want, claimed)
			require.Contains(t, claimed, "4:ship:"+strconv.Itoa(len(orders))+":"+orders+":"+core.Fingerprint([]byte(`{"order": 1}`)))
		})
	}
}
