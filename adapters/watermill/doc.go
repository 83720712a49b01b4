// Package watermillonce runs each Watermill message's job once per handler,
// whatever the number of copies delivered, with a jobonce Guard: a handler
// middleware for a router, and a publisher decorator that publishes each
// message once. It works the same on every Watermill backend (Kafka, NATS
// JetStream, RabbitMQ, Redis Streams, SQL, GoChannel).
//
//	import watermillonce "github.com/jobonce/jobonce/adapters/watermill"
//
// # Setup
//
// One middleware line:
//
//	router.AddMiddleware(watermillonce.MustMiddleware(guard, nil))
//
// MustMiddleware panics on a nil Guard, at start-up;
// NewMiddleware returns the error instead. With a poison queue, give it
// IsPoison as its filter (see Order in the middleware chain).
//
// # Keys
//
// A message's key names its effect. By default it is the handler's name
// (message.HandlerNameFromCtx), the subscribed topic
// (message.SubscribeTopicFromCtx) and core.Fingerprint of the payload, each
// but the last after its length, so copies with equal payloads on one topic
// share a key, and handlers of one name in two routers sharing a store, or
// on two topics, never share one. With Config.Key, it is the name's length,
// ":", the name, ":" and what Key returns, such as the message's UUID or a
// metadata field, so that no two handlers' keys meet however their names
// and keys are cut. Every handler of a message runs it once, under a key of
// its own: two handlers consuming one topic never skip each other's work.
// Config.LegacyDefaultKeys bridges the upgrade from default keys without
// the topic (docs/watermill.md). An empty key is invalid, as in every jobonce adapter:
// the handler does not run and the message goes to the poison queue,
// reported as core.Rejected. A message Config.Unguarded exempts runs unguarded,
// reported as core.Unguarded. Copies under one named key with different
// payloads are a conflict: the message goes to the poison queue. DefaultKey
// computes the default key of a message, and "jobonce key watermill" its
// stored key, to inspect it.
//
// A done key skips every later message with that key for the Guard's
// Retention (24h by default). Messages that legitimately repeat with equal
// payloads need a key that tells them apart (the UUID, when the producer
// sets a new one per message and reuses it on retries), or Config.Unguarded.
//
// # What happens to a message
//
//   - The key was free: the handler runs, with the job's idempotency key
//     and fence in msg.Context() (core.IdempotencyKey, core.Fence); its
//     claim is kept alive while it runs. That context is cancelled should
//     the claim be lost while the handler runs, and otherwise lives as long
//     as the message's own: a message the handler produces with it
//     (out.SetContext(msg.Context()), for tracing) is published by the
//     router after the handler has returned, by a publisher that honours
//     its context. Success records the done marker
//     and the router publishes the produced messages and acks. An error or
//     a panic releases the claim and reaches the router unchanged, which
//     nacks.
//   - Already done (a duplicate): the handler does not run; the messages
//     the run produced are returned again (see Produced messages) and the
//     copy is acked; if they were not stored, an error for which IsPoison
//     reports true.
//   - Another copy runs: the copy waits in its handler up to
//     Config.WaitRunning (10s), woken by the Guard's completion signal the
//     moment the other copy ends, and is then a duplicate, or runs the job
//     if the other copy failed; if the job still runs, the middleware nacks
//     the message itself and returns neither an error nor messages, so
//     that it comes back later while the router logs no error and no
//     handler failure is counted (the router's Ack after a nil error does
//     nothing to a nacked message). The Guard reports it as core.Running,
//     logged once at Debug.
//   - A conflict or an empty key: an error for which IsPoison reports true.
//   - The store failed: nothing runs; after Config.UnavailableDelay (1s) an
//     error matching core.ErrStoreUnavailable, and the message is nacked
//     (fail closed). Nothing is acked unless its job ran or is done.
//   - The message's context ended first (the router is closing): nothing
//     runs, even when the Guard fails open, and the error matches
//     ctx.Err().
//
// # Produced messages
//
// The router publishes a handler's produced messages after the handler has
// returned, so after the middleware has recorded the done marker; a publish
// that fails, or a crash in between, nacks or loses the delivery, and its
// redelivery is a duplicate. So that the produced messages are not lost
// then, the middleware stores them with the done marker (UUIDs, metadata and
// payloads), and a duplicate returns them again. A duplicate therefore
// publishes the run's messages a second time, with the same UUIDs: decorate
// the router's publisher with NewPublisher (its default key is the UUID) to
// publish each once, or let the next handler's own middleware skip them.
//
// They are stored up to the Guard's core.Config.MaxResultSize (64 KiB by
// default), for all of one message's produced messages, encoded. Beyond it
// the marker records that they were not stored and a warning is logged; a
// duplicate of that message cannot return them and is never acknowledged as
// if it had: its error matches ErrProducedNotStored and IsPoison reports
// true, so it goes to the poison queue, with the reason, for an operator to
// replay what it produced or to forget its marker (the jobonce command).
// Set MaxResultSize above the largest output of a handler. A stored result
// this release cannot read is treated the same way.
//
// # Order in the middleware chain
//
// Watermill runs the middleware added first outermost. The recommended
// order is:
//
//	poisonQueue, err := middleware.PoisonQueueWithFilter(pub, "poison", watermillonce.IsPoison)
//	…
//	router.AddMiddleware(
//		middleware.CorrelationID,
//		poisonQueue,
//		watermillonce.MustMiddleware(guard, nil),
//		middleware.Timeout(time.Minute),
//		middleware.Retry{MaxRetries: 3, InitialInterval: 100 * time.Millisecond}.Middleware,
//		middleware.Recoverer,
//	)
//	router.AddPublisherDecorators(func(pub message.Publisher) (message.Publisher, error) {
//		return watermillonce.NewPublisher(guard, pub, nil)
//	})
//
// PoisonQueue goes outside the middleware, so that it sees the conflicts,
// empty keys and duplicates whose produced messages were not stored;
// IsPoison keeps every other error out of it. A plain
// PoisonQueue would take a copy whose job is running, or one the store
// could not claim, off its topic: if the running copy then fails, the job
// is lost. Retry goes inside, so that a handler's retries run under one
// claim (one fence), kept alive by the heartbeat, with no other copy
// running between them; outside, every retry would claim the key again,
// and Retry would retry conflicts and running copies too. Timeout goes
// inside, so that it bounds the handler and its retries (a handler past it
// is cancelled and its claim released) while WaitRunning bounds a copy's
// wait; inside Retry it would need Retry.ResetContextOnRetry. Recoverer goes
// innermost, so that a panic becomes an error Retry retries; without it the
// middleware releases the claim and the router recovers the panic and
// nacks. CorrelationID only marks produced messages, and stored produced
// messages keep their metadata, so it may go anywhere.
//
// # Redelivery after a nack, per backend
//
// How soon a nacked copy comes back depends on the backend, not on jobonce:
//
//   - GoChannel: at once, to the same subscriber.
//   - Redis Streams (watermill-redisstream): at once to the same consumer
//     (after SubscriberConfig.NackResendSleep, none by default), the message
//     staying pending in the group; the consumer takes no other message
//     meanwhile. The resent copy's context is no longer cancelled when the
//     router closes, so a copy waiting then ends after WaitRunning, within
//     the router's CloseTimeout (30s). A message pending longer than
//     MaxIdleTime (60s) is claimed by another consumer of the group
//     (XPENDING, then XCLAIM), even while its consumer still runs it: that
//     copy finds the job running and waits.
//   - RabbitMQ (watermill-amqp): requeued at once (unless
//     NoRequeueOnNack), possibly to another consumer.
//   - NATS JetStream (watermill-nats): Nak, redelivered at once, or after
//     SubscriberConfig.NakDelay; a message not acked within the consumer's
//     AckWait (30s) is redelivered while it still runs, and that copy
//     waits. Set WaitRunning negative when NakDelay spaces redeliveries.
//   - Kafka (watermill-kafka): the same message again after
//     NackResendSleep (100ms); the partition waits behind it, since its
//     offset is not committed. A copy that finds its job running is one
//     that a rebalance handed to a new consumer while the old one runs it.
//   - SQL (watermill-sql): again after ResendInterval (1s); the consumer
//     group's offset waits behind it.
//
// On a backend that hands a consumer one message at a time (RabbitMQ with
// prefetch 1, a Kafka partition, JetStream with MaxAckPending 1, a Redis
// Streams consumer, SQL), a copy waiting for its running copy stalls that
// consumer until the running copy ends, by the backend's nature: keep
// WaitRunning above the job's usual run, or set it negative only with a
// redelivery delay on the backend's side (docs/watermill.md has what to set
// for each).
//
// Each nack of a waiting copy is a delivery: a backend that limits
// deliveries (RabbitMQ quorum queues' delivery-limit, JetStream's
// MaxDeliver, a NakDelay with MaxRetryDelay) drops or dead-letters a copy
// that outwaits it, so keep WaitRunning times the limit above the longest
// job.
//
// # Publishing once
//
// NewPublisher decorates a publisher so that each message is published at
// most once per key (by default its UUID) and topic within a window
// (PublisherConfig.Window, 24h), through Guard.Enqueue: the key is claimed
// while the message is published and marked for the window once it is; a
// claim whose publish fails is released at once, so a retried Publish goes
// out. Messages go out one at a time, each in a call of the decorated
// publisher of its own, since most backends (Redis Streams, RabbitMQ)
// publish a call's messages one by one and stop at the first error: each
// message's marker says what its own publish did, and a retry publishes
// only the messages that did not go out. A message whose key another
// Publish is publishing at that moment gets an error matching
// core.ErrRunning, never a nil error.
//
// # Compared with middleware.Deduplicator
//
// Watermill's Deduplicator records a message's key before its handler runs,
// in one process's memory: a copy arriving while the first runs is dropped
// (and lost, should the first fail), and a redelivery of a message whose
// handler failed is acknowledged as a duplicate without running. In
// TestRouterFailedMessageIsRetriedNotLost, where each of 20 messages fails
// its first attempt, the Deduplicator acknowledged all 20 without running
// them, on GoChannel and on Redis Streams; under this middleware all 20 ran
// on their redelivery. Its claims and done markers live in the Guard's
// store, shared by every process.
package watermillonce
