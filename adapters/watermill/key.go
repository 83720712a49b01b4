package watermillonce

import (
	"strconv"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/jobonce/jobonce/core"
)

// job returns the message's job, handled by handler: unguarded when
// Config.Skip says so; else keyed by the handler's name and Config.Key
// (the name's length, ":", the name, ":" and the key, so that no two
// handlers' keys meet however their names and keys are cut), or by default
// by the handler, the subscribed topic and the payload (see defaultKey),
// and fingerprinted by Config.Fingerprint (by default the payload's
// fingerprint under a named key, none under the default key, which holds
// it). legacyKey is the earlier release's form of a default key under
// Config.LegacyDefaultKeys, else "".
func (m *middleware) job(msg *message.Message, handler string) (job core.Job, legacyKey string) {
	if m.cfg.Skip != nil && m.cfg.Skip(msg) {
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
	job = core.Job{Key: defaultKey(handler, message.SubscribeTopicFromCtx(msg.Context()), sum),
		Fingerprint: fp, Kind: handler, Source: source, DefaultKey: true}
	if m.cfg.LegacyDefaultKeys {
		legacyKey = handler + ":" + sum
	}
	return job, legacyKey
}

// defaultKey returns the default key of a message handled by handler from
// topic whose payload's fingerprint is sum: the name's length, ":", the
// name, ":", the topic's length, ":", the topic, ":" and sum, so that
// handlers of one name in two routers, or on two topics, never share one.
func defaultKey(handler, topic, sum string) string {
	return strconv.Itoa(len(handler)) + ":" + handler + ":" + strconv.Itoa(len(topic)) + ":" + topic + ":" + sum
}
