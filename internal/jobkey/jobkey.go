// Package jobkey derives the jobs of deliveries for the adapters, so that
// Asynq, SQS, River and Watermill name jobs by the same rules, and holds the
// rules of their default keys, which the jobonce command computes too.
package jobkey

import "github.com/jobonce/jobonce/core"

// Job returns the job of one delivery from source ("asynq", "sqs",
// "river"), whose kind (task type, queue name, River kind) names it in
// metrics.
//
// When the user's configuration named a key (named is true), key is used as
// it is, even when empty, so that the Guard rejects it (core.ErrInvalidKey)
// rather than guarding the delivery under a key nobody chose; its
// fingerprint is fingerprint() when set, else core.Fingerprint(payload).
//
// Otherwise the key is the default: kind, ":" and core.Fingerprint of the
// payload (128 bits of SHA-256), so copies of one delivery share it and
// different payloads do not, and the job's DefaultKey is set: the same
// payload sent again on purpose is a copy too. No fingerprint is stored with
// it, since the key holds one already, unless fingerprint is set.
func Job(source, kind string, payload []byte, key string, named bool, fingerprint func() string) core.Job {
	var fp string
	switch {
	case fingerprint != nil:
		fp = fingerprint()
	case named:
		fp = core.Fingerprint(payload)
	}
	if !named {
		key = Default(kind, payload)
	}
	return core.Job{Key: key, Fingerprint: fp, Kind: kind, Source: source, DefaultKey: !named}
}

// Occurrence returns the job of one delivery of a periodic job from source,
// under key, which an adapter's default made to name the occurrence (its
// schedule's time, its task): copies of the occurrence share the key and
// other occurrences do not, whatever their payloads, so the job's DefaultKey
// is false and no fingerprint is stored unless fingerprint is set (the
// user's Config.Fingerprint).
func Occurrence(source, kind, key string, fingerprint func() string) core.Job {
	var fp string
	if fingerprint != nil {
		fp = fingerprint()
	}
	return core.Job{Key: key, Fingerprint: fp, Kind: kind, Source: source}
}

// Default returns the default key of a delivery of kind (a task type, a
// queue's name, a River kind) whose payload is payload: kind, ":" and
// core.Fingerprint of the payload.
func Default(kind string, payload []byte) string {
	return kind + ":" + core.Fingerprint(payload)
}
