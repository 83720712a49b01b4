package watermillonce

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/nilcheck"
)

// PublisherConfig configures NewPublisher. A nil *PublisherConfig gives the
// defaults; it is copied, so later changes to it have no effect.
type PublisherConfig struct {
	// Key returns the key of a message to publish: a message whose key was
	// published to the same topic within Window is not published again.
	// Return a metadata field to name the message yourself
	// (msg.Metadata.Get("order_id")). An empty key is invalid: Publish
	// publishes nothing and returns an error matching core.ErrInvalidKey.
	// Defaults to nil: the message's UUID, which a producer sets once per
	// logical message and a retried Publish reuses.
	Key func(msg *message.Message) string

	// Window is how long a published key keeps later messages with that key
	// from being published to the same topic. Set it to at least the
	// Guard's Retention when the decorated publisher publishes the messages
	// a handler produced (a router's publisher), so that the messages a
	// duplicate returns again are not published twice. Defaults to 24h, the
	// Guard's default Retention.
	Window time.Duration
}

const defaultWindow = 24 * time.Hour

// NewPublisher returns a message.Publisher that publishes each message
// through pub at most once per key (PublisherConfig.Key, by default the
// message's UUID) and topic within the window, using Guard.Enqueue: the
// key is claimed while the message is published and marked for the window
// once it is; when publishing fails, the claim is released at once, so a
// retry publishes it. cfg may be nil for the defaults.
//
// Publish publishes the messages not published within the window one at a
// time, each in a call of pub.Publish of its own, in order; one whose key
// came earlier in the same call is not published again. It stops at the
// first message that fails and returns pub's error unchanged: the messages
// before it went out and keep their markers, so a retry of the call
// publishes only the rest. While another Publish publishes a message with
// the same key to the topic, it stops there with an error matching
// core.ErrRunning, so that a retry finds out what that Publish did. It
// returns nil when every message was published before. When the store
// fails, it stops with an error matching core.ErrStoreUnavailable (unless
// the Guard fails open). A message's context gives the store calls its
// values, never a deadline or a cancellation: each store call is bounded by
// the Guard's StoreTimeout. A message with an empty key makes it publish
// nothing and return an error matching core.ErrInvalidKey.
//
// To decorate the publisher of every handler of a router:
//
//	router.AddPublisherDecorators(func(pub message.Publisher) (message.Publisher, error) {
//		return watermillonce.NewPublisher(guard, pub, nil)
//	})
//
// NewPublisher returns an error, naming the problem, for a nil Guard or
// publisher or an invalid PublisherConfig. Close closes pub.
func NewPublisher(g *core.Guard, pub message.Publisher, cfg *PublisherConfig) (message.Publisher, error) {
	switch {
	case g == nil:
		return nil, errors.New("jobonce: watermillonce: NewPublisher: Guard is nil")
	case nilcheck.IsNil(pub):
		return nil, errors.New("jobonce: watermillonce: NewPublisher: publisher is nil")
	}
	var c PublisherConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Window == 0 {
		c.Window = defaultWindow
	}
	if c.Window < time.Millisecond {
		return nil, fmt.Errorf("jobonce: watermillonce: PublisherConfig.Window must be at least 1ms, got %s", c.Window)
	}
	if c.Key == nil {
		c.Key = func(msg *message.Message) string { return msg.UUID }
	}
	return &publisher{g: g, pub: pub, cfg: c}, nil
}

type publisher struct {
	g   *core.Guard
	pub message.Publisher
	cfg PublisherConfig
}

// Publish implements message.Publisher.
func (p *publisher) Publish(topic string, msgs ...*message.Message) error {
	keys := make([]string, len(msgs))
	for i, m := range msgs {
		if m == nil {
			return fmt.Errorf("jobonce: watermillonce: Publish to topic %q: message %d is nil", topic, i)
		}
		k := p.cfg.Key(m)
		if k == "" {
			return fmt.Errorf("jobonce: watermillonce: Publish to topic %q: message %s: PublisherConfig.Key returned an empty key: %w", topic, m.UUID, core.ErrInvalidKey)
		}
		keys[i] = publishKey(topic, k)
	}
	for i, m := range msgs {
		// A message's context carries values (tracing), not the caller's
		// say on stopping: Publish takes no context.
		ctx := context.WithoutCancel(m.Context())
		_, err := p.g.Enqueue(ctx, keys[i], p.cfg.Window, func(context.Context) error {
			return p.pub.Publish(topic, m)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// Close implements message.Publisher: it closes the decorated publisher.
func (p *publisher) Close() error { return p.pub.Close() }

// publishKey returns the Enqueue key of key on topic: the topic's length,
// ":", the topic, ":" and the key, so that no two pairs share one.
func publishKey(topic, key string) string {
	return strconv.Itoa(len(topic)) + ":" + topic + ":" + key
}
