package backends_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/stretchr/testify/require"

	watermillonce "github.com/jobonce/jobonce/adapters/watermill"
	"github.com/jobonce/jobonce/adapters/watermill/internal/watermilltest"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/testenv"
)

// Redis Streams hands a message that has been pending longer than
// MaxIdleTime to another consumer of the group (XPENDING, then XCLAIM),
// even while its first consumer is still handling it. The claimed copy
// finds the job running, waits for it, and is acknowledged as a duplicate:
// the slow handler runs once.
func TestRedisStreamClaimedCopyWaitsForTheSlowHandler(t *testing.T) {
	t.Parallel()
	e := newRedisStreamEnv(t).(*redisStreamEnv)
	var outs testenv.Outcomes
	g := e.guard(t, &core.Config{Observer: outs.Observe})
	topic := e.topic("reports")
	var runs atomic.Int64
	started, release := make(chan struct{}), make(chan struct{})
	acked := newDeliveries(t)
	for _, consumer := range []string{"a", "b"} {
		sub := e.subscriberWith(t, redisstream.SubscriberConfig{
			ConsumerGroup: "g", Consumer: consumer,
			MaxIdleTime: 300 * time.Millisecond, ClaimInterval: 50 * time.Millisecond,
		})
		startRouter(t, route{handler: "reports", sub: sub, topic: topic, fn: watermilltest.Blocking(&runs, started, release)},
			acked.middleware, watermillonce.MustMiddleware(g, nil))
	}
	watermilltest.Publish(t, e.publisher(t), topic, watermilltest.NewMessage("monthly"))
	<-started
	e.awaits().Began(t, 1) // a consumer claimed the pending message, found its job running, and waits
	close(release)
	acked.waitAcked(t, 2)
	require.EqualValues(t, 1, runs.Load())
	require.EqualValues(t, 1, outs.Get(core.Ran))
	require.GreaterOrEqual(t, outs.Get(core.Duplicate), int64(1))
}
