package watermillonce

import (
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Config configures the middleware. A nil *Config gives the defaults. The
// Config is copied, so later changes have no effect.
type Config struct {
	// Key returns the key that names a message's effect, such as its UUID or
	// an order ID from its metadata. The job key is the handler name's
	// length, ":", the name, ":" and what Key returns. So each handler of a
	// topic runs a message once, under a key of its own. Handlers of one
	// name in two routers share keys, unless Key adds the topic
	// (message.SubscribeTopicFromCtx). An empty key is invalid
	// (core.ErrInvalidKey): the handler does not run, and IsPoison reports
	// true for the error. Defaults to nil: DefaultKey.
	Key func(msg *message.Message) string

	// Fingerprint returns the fingerprint of a message's payload. A key held
	// or done with a different fingerprint is a conflict (core.ErrConflict),
	// and IsPoison reports true for the error. Return "" to turn the check
	// off. Defaults to nil: core.Fingerprint of the payload under Key, and
	// none under the default key, which holds it.
	Fingerprint func(msg *message.Message) string

	// Unguarded reports messages that run without the guard, such as those
	// of a handler that is idempotent already. They are reported as
	// core.Unguarded, and carry no idempotency key or fence. Defaults to nil:
	// every message is guarded.
	Unguarded func(msg *message.Message) bool

	// WaitRunning is how long a copy that finds its job running waits in its
	// handler before the middleware nacks it. The Guard's completion signal
	// wakes it when the running copy ends. Most backends redeliver a nacked
	// message at once, so a copy the Guard does not keep waiting is held as
	// long all the same. Negative: no wait, for a backend that delays
	// redeliveries itself. Defaults to 10s.
	WaitRunning time.Duration

	// LegacyDefaultKeys claims a message under the default key also under
	// the key's form without the topic: the handler's name, ":" and the
	// payload's fingerprint. Both done markers are written, and the handler
	// sees that form's idempotency key and fence. It bridges a rolling
	// upgrade from that form, at the cost of a second claim and done marker
	// per message. docs/watermill.md says when to turn it on and off.
	// Defaults to false.
	LegacyDefaultKeys bool

	// UnavailableDelay is how long a message that could not be claimed,
	// because the store failed, waits in its handler before it is nacked.
	// It keeps a backend that redelivers at once from spinning against a
	// store that is down. Negative: no delay. Defaults to 1s.
	UnavailableDelay time.Duration
}

const (
	defaultWaitRunning      = 10 * time.Second
	defaultUnavailableDelay = time.Second
)

// withDefaults returns a copy of c with the defaults applied.
func (c *Config) withDefaults() Config {
	var cfg Config
	if c != nil {
		cfg = *c
	}
	if cfg.WaitRunning == 0 {
		cfg.WaitRunning = defaultWaitRunning
	}
	if cfg.UnavailableDelay == 0 {
		cfg.UnavailableDelay = defaultUnavailableDelay
	}
	return cfg
}
