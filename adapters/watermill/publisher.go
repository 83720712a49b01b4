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
// message's UUID) and topic within the window, using Guard.Enqueue: a
// marker is set for the key only if none exists, then the message is
// published; when publishing fails, the marker is deleted at once, so a
// retry publishes it. cfg may be nil for the defaults.
//
// Publish publishes the messages not published within the window in one
// call of pub.Publish, in order; one whose key came earlier in the same
// call is not published again. It returns nil when every message was
// published before. When pub.Publish fails, it deletes the markers of the
// call and returns pub's error unchanged. While another Publish publishes a
// message with the same key to the topic, it returns an error matching
// core.ErrRunning (nothing of the call that was not published before goes
// out), so that a retry finds out what that Publish did. When the store fails, it publishes
// nothing (unless the Guard fails open) and returns an error matching
// core.ErrStoreUnavailable. A message's context gives the store calls its
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
	keys := make([]string, 0, len(msgs))
	unique := make([]*message.Message, 0, len(msgs))
	seen := make(map[string]bool, len(msgs))
	for i, m := range msgs {
		if m == nil {
			return fmt.Errorf("jobonce: watermillonce: Publish to topic %q: message %d is nil", topic, i)
		}
		k := p.cfg.Key(m)
		if k == "" {
			return fmt.Errorf("jobonce: watermillonce: Publish to topic %q: message %s: PublisherConfig.Key returned an empty key: %w", topic, m.UUID, core.ErrInvalidKey)
		}
		if k = publishKey(topic, k); !seen[k] { // a key that came earlier in the call goes out once
			seen[k] = true
			keys, unique = append(keys, k), append(unique, m)
		}
	}
	return p.publishFrom(topic, unique, keys, make([]*message.Message, 0, len(unique)))
}

// publishFrom sets the marker of msgs[0] and, within its Enqueue, goes on
// with the rest; the last publishes fresh, the messages whose markers this
// call set, in one call. A failure anywhere unwinds through every Enqueue
// of the call, each deleting its marker.
func (p *publisher) publishFrom(topic string, msgs []*message.Message, keys []string, fresh []*message.Message) error {
	if len(msgs) == 0 {
		if len(fresh) == 0 {
			return nil
		}
		return p.pub.Publish(topic, fresh...)
	}
	m := msgs[0]
	// A message's context carries values (tracing), not the caller's say on
	// stopping: Publish takes no context, and a handler's produced messages
	// may carry its job's context, which ends when the handler returns.
	ctx := context.WithoutCancel(m.Context())
	published, err := p.g.Enqueue(ctx, keys[0], p.cfg.Window, func(context.Context) error {
		return p.publishFrom(topic, msgs[1:], keys[1:], append(fresh, m))
	})
	if err != nil || published {
		return err
	}
	return p.publishFrom(topic, msgs[1:], keys[1:], fresh) // m's key was published within the window
}

// Close implements message.Publisher: it closes the decorated publisher.
func (p *publisher) Close() error { return p.pub.Close() }

// publishKey returns the Enqueue key of key on topic: the topic's length,
// ":", the topic, ":" and the key, so that no two pairs share one.
func publishKey(topic, key string) string {
	return strconv.Itoa(len(topic)) + ":" + topic + ":" + key
}
