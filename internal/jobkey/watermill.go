package jobkey

import "strconv"

// WatermillKey returns the default key of a message handled by handler from
// topic whose payload's fingerprint (core.Fingerprint) is sum: the name's
// length, ":", the name, ":", the topic's length, ":", the topic, ":" and
// sum, so that handlers of one name in two routers, or on two topics, never
// share one.
func WatermillKey(handler, topic, sum string) string {
	return strconv.Itoa(len(handler)) + ":" + handler + ":" + strconv.Itoa(len(topic)) + ":" + topic + ":" + sum
}

// WatermillLegacyKey returns the default key an earlier release gave the
// message: the handler's name, ":" and sum, the payload's fingerprint.
func WatermillLegacyKey(handler, sum string) string {
	return handler + ":" + sum
}
