package watermillonce

import (
	"strconv"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/jobkey"
)

// DefaultKey returns the key the middleware gives msg under a Config
// without Key. handler names the handler, and topic the subscribed topic.
// The key is the name's length, ":", the name, ":", the topic's length,
// ":", the topic, ":" and core.Fingerprint of the payload
// ("7:process:6:orders:" and the fingerprint). Inside a handler,
// message.HandlerNameFromCtx and message.SubscribeTopicFromCtx give handler
// and topic.
func DefaultKey(msg *message.Message, handler, topic string) string {
	job, _ := (&middleware{}).job(msg, handler, topic)
	return job.Key
}

// job returns the message's job, handled by handler from topic: unguarded
// when Config.Unguarded says so; else keyed by the handler's name and Config.Key
// (the name's length, ":", the name, ":" and the key, so that no two
// handlers' keys meet however their names and keys are cut), or by default
// by the handler, the topic and the payload (jobkey.WatermillKey), and
// fingerprinted by Config.Fingerprint (by default the payload's fingerprint
// under a named key, none under the default key, which holds it).
// legacyKey is the earlier release's form of a default key under
// Config.LegacyDefaultKeys, else "".
func (m *middleware) job(msg *message.Message, handler, topic string) (job core.Job, legacyKey string) {
	if m.cfg.Unguarded != nil && m.cfg.Unguarded(msg) {
		return core.Job{Kind: handler, Source: source, Unguarded: true}, "" // no key: no idempotency key either
	}
	var fp string
	if m.cfg.Fingerprint != nil {
		fp = m.cfg.Fingerprint(msg)
	}
	if m.cfg.Key != nil {
		var key string
		if k := m.cfg.Key(msg); k != "" { // an empty key stays empty, and is rejected
			key = strconv.Itoa(len(handler)) + ":" + handler + ":" + k
		}
		if m.cfg.Fingerprint == nil {
			fp = core.Fingerprint(msg.Payload)
		}
		return core.Job{Key: key, Fingerprint: fp, Kind: handler, Source: source}, ""
	}
	sum := core.Fingerprint(msg.Payload)
	job = core.Job{Key: jobkey.WatermillKey(handler, topic, sum), Fingerprint: fp, Kind: handler, Source: source, DefaultKey: true, KeyHint: keyHint}
	if m.cfg.LegacyDefaultKeys {
		legacyKey = jobkey.WatermillLegacyKey(handler, sum)
	}
	return job, legacyKey
}

// keyHint is what the first skip under the default key says of it.
var keyHint = core.KeyHint{Key: "handler, topic and payload hash",
	Settings: "watermillonce: set Config.Key (the message UUID, a metadata field), or exempt messages with Config.Unguarded"}
