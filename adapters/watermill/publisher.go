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
// defaults. It is copied, so later changes have no effect.
type PublisherConfig struct {
	// Key returns the key of a message to publish. A message whose key was
	// published to the same topic within Window is not published again. An
	// empty key is invalid: Publish publishes nothing and returns an error
	// matching core.ErrInvalidKey. Defaults to nil: the message's UUID.
	Key func(msg *message.Message) string

	// Window is how long a published key keeps later messages with that key
	// from being published to the same topic. On a router's publisher, set
	// it to at least the Guard's Retention, so that the messages a duplicate
	// returns are not published twice. A nonzero value under 1ms is invalid.
	// Defaults to 24h.
	Window time.Duration
}

const defaultWindow = 24 * time.Hour

// NewPublisher returns a message.Publisher that publishes each message
// through pub at most once per key and topic within the window, using
// Guard.Enqueue. A key whose publish fails is released at once, so a retry
// publishes the message. cfg may be nil for the defaults.
//
// Publish sends the messages one at a time, in order, each in a call of
// pub.Publish of its own. It skips a message whose key went out within the
// window, in this call or before. It stops at the first error and returns
// it:
//
//   - pub's error, unchanged: the messages before it went out, so a retry
//     publishes only the rest;
//   - an error matching core.ErrRunning while another Publish publishes the
//     same key to the topic;
//   - an error matching core.ErrStoreUnavailable when the store fails,
//     unless the Guard fails open;
//   - an error for a nil message, or one matching core.ErrInvalidKey for an
//     empty key, before anything is published.
//
// Each store call is bounded by the Guard's StoreTimeout. A message's
// context gives the store calls its values, never a deadline. Close closes
// pub. To decorate the publisher of every handler of a router:
//
//	router.AddPublisherDecorators(func(pub message.Publisher) (message.Publisher, error) {
//		return watermillonce.NewPublisher(guard, pub, nil)
//	})
//
// NewPublisher returns an error for a nil Guard or publisher, or an invalid
// PublisherConfig.
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
