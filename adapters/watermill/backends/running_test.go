package backends_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	watermillonce "github.com/jobonce/jobonce/adapters/watermill"
	"github.com/jobonce/jobonce/adapters/watermill/internal/watermilltest"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/testenv"
)

// routerLog is a router's logger that keeps what it logs at ERROR.
type routerLog struct {
	watermill.NopLogger
	mu     *sync.Mutex
	errors *[]string
}

func newRouterLog() routerLog { return routerLog{mu: new(sync.Mutex), errors: new([]string)} }

func (l routerLog) Error(msg string, err error, _ watermill.LogFields) {
	l.mu.Lock()
	defer l.mu.Unlock()
	*l.errors = append(*l.errors, msg+": "+err.Error())
}

func (l routerLog) With(watermill.LogFields) watermill.LoggerAdapter { return l }

func (l routerLog) logged() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), *l.errors...)
}

// handlerErrors is a middleware that counts the errors its handler
// returns, as a handler-failure metric would.
type handlerErrors struct{ n atomic.Int64 }

func (c *handlerErrors) middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		out, err := h(msg)
		if err != nil {
			c.n.Add(1)
		}
		return out, err
	}
}

// A copy that finds its job running past WaitRunning is nacked, so that it
// comes back, but is no handler failure: the router logs nothing at ERROR
// and no error reaches the middleware outside; the Guard reports it as
// Running. Once the running copy is done, the copy is a duplicate.
func TestRouterRunningCopyIsNackedWithoutAnError(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e := b.new(t)
			var outs testenv.Outcomes
			g := e.guard(t, &core.Config{Observer: outs.Observe})
			topic := e.topic("reports")
			var runs atomic.Int64
			started, release := make(chan struct{}), make(chan struct{})
			acked := newDeliveries(t)
			log := newRouterLog()
			var failures handlerErrors
			for _, group := range []string{"a", "b"} { // each group gets the message
				router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 20 * time.Second}, log)
				require.NoError(t, err)
				router.AddMiddleware(acked.middleware, failures.middleware,
					watermillonce.MustMiddleware(g, &watermillonce.Config{WaitRunning: 20 * time.Millisecond}))
				route{handler: "reports", sub: e.subscriber(t, group), topic: topic, fn: watermilltest.Blocking(&runs, started, release)}.add(router)
				watermilltest.RunRouter(t, router)
			}

			watermilltest.Publish(t, e.publisher(t), topic, watermilltest.NewMessage("monthly"))
			<-started
			deadline := time.Now().Add(20 * time.Second)
			for acked.nacks.Load() < 2 {
				require.True(t, time.Now().Before(deadline), "the running copy was not nacked")
				time.Sleep(time.Millisecond)
			}
			close(release)
			acked.waitAcked(t, 2)
			require.EqualValues(t, 1, runs.Load())
			require.Empty(t, log.logged(), "the router logged a running copy at ERROR")
			require.Zero(t, failures.n.Load(), "a running copy returned an error")
			require.GreaterOrEqual(t, outs.Get(core.Running), int64(2))
			require.EqualValues(t, 1, outs.Get(core.Duplicate))
		})
	}
}
