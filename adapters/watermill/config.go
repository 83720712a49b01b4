package watermillonce

import (
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Config configures the middleware. A nil *Config gives the defaults; the
// Config is copied, so later changes to it have no effect.
//
// The messages a handler produces are stored with its done marker, so that
// a duplicate returns them again, up to the Guard's
// core.Config.MaxResultSize (64 KiB by default) for all of one message's
// produced messages, encoded (UUIDs, metadata and payloads). Beyond it the
// marker says they were not stored, a warning is logged, and a duplicate of
// the message, which cannot return them, goes to the poison path
// (ErrProducedNotStored) rather than being acknowledged without them: set
// MaxResultSize on the Guard above the largest output of a handler.
type Config struct {
	// Key returns the key that names a message's effect, such as an order
	// id from its metadata or its UUID. The job key is the length of the
	// handler's name, ":", the name, ":" and what Key returns ("5:email:" and
	// the key), so that every handler consuming one message
	// (a topic with several handlers) runs it once, each under a key of its
	// own; handlers of one name in two routers sharing a store share it,
	// unless Key names the topic (message.SubscribeTopicFromCtx). An empty
	// key is invalid (core.ErrInvalidKey): the handler does not run and the
	// message goes to the poison path (IsPoison), as in every adapter;
	// exempt messages with Unguarded instead. Defaults to nil: the handler's name,
	// the subscribed topic and core.Fingerprint of the payload, each but the
	// last after its length ("7:process:6:orders:" and the fingerprint), so
	// copies with equal payloads on one topic share a key.
	Key func(msg *message.Message) string

	// Fingerprint returns the fingerprint of a message's payload. A key held
	// or done with a different fingerprint is a conflict (two different
	// messages share a key): the message goes to the poison path. Return ""
	// to turn the check off. Defaults to nil: core.Fingerprint of the payload
	// when Key is set; the default key holds it already, so none is stored.
	Fingerprint func(msg *message.Message) string

	// Unguarded reports messages that run without the guard, such as those of a
	// handler that is idempotent already. They are reported to the Guard's
	// Observer, log and metrics as core.Unguarded under their handler's
	// name; they have no key, so no idempotency key or fence either.
	// Defaults to nil: every message is guarded.
	Unguarded func(msg *message.Message) bool

	// WaitRunning is how long a copy that finds its job running elsewhere
	// waits in its handler for that copy to finish, before it is nacked
	// (with no error, see NewMiddleware): the Guard's completion
	// signal wakes it the moment the running copy's done marker is written
	// (it is then a duplicate) or its claim released (it runs). A copy of a
	// kind that the Guard has seen run longer than the running copy has
	// left within the wait is held as long without waiting for the signal
	// (see core.Job.WaitUntil). Most backends redeliver a nacked message at
	// once (see the package documentation), so without a wait a copy would
	// come straight back; a negative value returns at once, for a backend
	// that delays redeliveries itself (a JetStream subscriber with
	// NakDelay). Defaults to 10s.
	WaitRunning time.Duration

	// LegacyDefaultKeys is for the rolling upgrade from a release whose
	// default key had no topic (the handler's name, ":" and the payload's
	// fingerprint): a message under the default key is claimed under that
	// earlier key too, and within that claim under its own, so that a copy
	// that either release ran, or runs, is found, and both done markers are
	// written; the handler sees the earlier key's idempotency key and
	// fence. It costs a second claim and done marker per message, and a
	// message that runs is reported under each key (Ran, or Failed, twice).
	// Set it on
	// every process of the new release, and turn it off once no process of
	// the earlier release has run for the Guard's Retention (see
	// docs/watermill.md). Defaults to false.
	LegacyDefaultKeys bool

	// UnavailableDelay is how long a message that could not be claimed
	// because the store failed waits in its handler before it is nacked, so
	// that a backend that redelivers at once does not spin against a store
	// that is down. A negative value returns at once. Defaults to 1s.
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
