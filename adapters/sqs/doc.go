// Package sqsonce runs each Amazon SQS message's job once, on top of a
// jobonce Guard: a claim in the store before the handler runs, a done marker
// after it, and SQS's own visibility timeout for everything that must wait.
//
//	import sqsonce "github.com/jobonce/jobonce/adapters/sqs"
//
// # Two ways in
//
//	p := &sqsonce.Poller{Client: sqsClient, QueueURL: queueURL, Guard: guard, Handler: handle}
//	err := p.Run(ctx)
//
// On a standard queue a message's default key is the queue's name and a
// hash of its body, so a message sent again with the same body within the
// Guard's Retention (24h by default) is skipped as a copy; on a FIFO queue it
// is the queue and the MessageId, so every message sent runs. Work that
// repeats on purpose with one body takes one of these instead:
//
//	p.Config = &sqsonce.Config{KeyAttribute: "job"}                                                    // the sender names the key in a message attribute
//	p.Config = &sqsonce.Config{Key: func(m types.Message) string { return aws.ToString(m.MessageId) }} // every message sent runs once
//
// Decorate wraps a handler for a receive loop of your own: it claims the
// message's key, runs the handler, records the done marker and deletes the
// message. Poller is a complete consumer: long polling, bounded concurrency,
// one store round trip to claim each received batch and one to record it,
// batched deletes, visibility extended while a handler runs, and a graceful
// stop.
//
// # Poller
//
// The Poller asks for a batch only when it has handler slots free for it,
// claims the batch's keys in one store round trip (Guard.Claim), runs the
// claimed handlers through Claim.Work, records their done markers in one
// round trip (Guard.Finish) and deletes the batch with DeleteMessageBatch:
// 0.2 store round trips per message in full batches of ten on a
// driver.BatchStore such as redisstore. A batch's deletes and visibility
// changes are sent in order on a goroutine of their own, so a finished job's
// done marker is written within FlushDelay, never behind a slow SQS call for
// another message. Of the copies of one job in one batch, the second is
// claimed once the first has settled, so it is deleted as a duplicate at
// once; the copies after it are claimed with the first, without waiting,
// and hidden (or deleted, if the job is done), so that they take no handler
// slot while it runs.
// Cancelling Run's context stops receiving; running handlers get
// ShutdownTimeout to finish, then their contexts are cancelled and their
// messages handed back to the queue (visibility 0). So are messages whose
// claims the store has not answered by then: they did not run, and they are
// counted as Stats.Canceled, not as failures or store outages. Run waits 5s
// more for handlers whose contexts were cancelled; a handler that ignores its
// context is left running and Run returns ErrHandlersRunning: its message is
// not deleted, its visibility no longer renewed, and a copy received
// meanwhile finds its job running.
//
// # What happens to a message
//
//   - The handler succeeded, or the key is already done (a duplicate): the
//     message is deleted.
//   - Another copy is running: the message waits, holding its handler slot,
//     up to Config.WaitRunning for that copy's outcome when the Guard lets
//     it (one copy of a key, and no more than core.Config.WaitingShare of
//     the messages in progress). Otherwise, or still running, the
//     message's visibility is set to a delay that doubles with its
//     ApproximateReceiveCount (never beyond SQS's 12-hour limit), so a
//     copy waiting on a long job is received only a handful of times. With the defaults it is hidden 10s, 20s, 40s, …, so
//     it reaches the dead-letter queue only if the job runs on for more than
//     about 70s after the copy's first receive with a maxReceiveCount of 3,
//     5 min with 5, 2.8h with 10: set maxReceiveCount above what the longest
//     job needs. A receive loop that does not ask for that attribute gets a
//     warning from Decorate, once, and delays that grow only with the
//     receives its handler sees.
//   - The handler failed: the claim is released and the message is left to
//     the queue's own redelivery (optionally after Config.FailureDelay).
//   - The key is held or done with a different body (ErrConflict), or the
//     key is invalid: the message is left alone, so the queue's redrive policy
//     moves it to the dead-letter queue; the outcome is logged and counted.
//   - The store cannot be reached (no answer within the Guard's
//     StoreTimeout): nothing runs and nothing is deleted (fail closed); the
//     visibility backs off so an outage does not burn receives.
//   - The context ended before the claim was answered (core.Canceled):
//     nothing runs, nothing is deleted and no failure is charged; a stopping
//     Poller hands the message back, Decorate leaves it as it is.
//
// # FIFO queues
//
// A message group's messages run one after the other, in order. SQS may
// return several messages of one group in one receive, and every receive
// counts toward each message's maxReceiveCount, so a group whose first
// message keeps failing would drag the later ones (its followers) to the
// dead-letter queue with it, unrun, if they were handed back with it. The
// Poller does not hand them back: a message that fails while followers wait
// in the same batch is retried in place, after Config.FailureDelay (1s when
// zero) doubled per attempt, while the whole group stays hidden (its
// visibility is renewed), for as many attempts as the queue would still give
// it: maxReceiveCount − ApproximateReceiveCount + 1. If it succeeds, its
// followers run. If its attempts are used up, it is given up: left to the
// queue as a failure, logged and counted (Stats.GivenUp), and its followers
// run in the same batch, as they would once the queue's redrive policy had
// moved it to the dead-letter queue. The Poller remembers the messages it gave
// up and hands them back unrun (for a second) when it receives them again,
// until the redrive policy moves them; another Poller process does not know
// them and runs them under the usual rules.
//
// So a follower is charged only receives in which it runs: it comes back
// unrun only when Run stops, when a message before it is running elsewhere or
// cannot be claimed (store unreachable), when keeping its group hidden would
// pass SQS's 12-hour limit, or when maxReceiveCount is unknown: Run reads it
// from the queue's RedrivePolicy (Poller.MaxReceiveCount overrides), and a
// queue without a redrive policy never dead-letters anything, so there the
// group is handed back.
//
// # Keys
//
// A message's key names its effect. By default it is the message attribute
// named by Config.KeyAttribute when present, else, on a FIFO queue, the
// queue's name and the message's MessageId, else a hash of the body
// prefixed with the queue's name. A FIFO message is keyed by its MessageId,
// not its deduplication id, because SQS deduplicates an id only within five
// minutes (after them the same id, or the same body under content-based
// deduplication, is a new message that must run) while every duplicate
// delivery it makes is a redelivery that keeps its MessageId; so one
// deduplication id in two groups names two messages too, and no system
// attribute has to be asked for. A FIFO message never falls back to its
// body's hash: one without a MessageId (SQS always gives one) is left unrun
// with an error saying so. With Config.KeyAttribute set, Decorate leaves a
// message that carries no message attributes at all unrun, with an error
// matching ErrMissingAttribute, since a receive without
// MessageAttributeNames gets none; one that carries other attributes but
// not the key attribute falls back to the default key. A message left for a
// missing attribute is logged at Warn, naming the receive setting to fix,
// and comes back on each receive until the queue's redrive policy moves it
// to the dead-letter queue. Config.Key overrides all of them. A named key
// (the attribute, the MessageId, Config.Key) is stored with the body's
// fingerprint (core.Fingerprint), so one key reused for a different body is
// reported as a conflict; a standard queue's default key holds the body's
// hash already. An empty key from Config.Key is invalid, as in every jobonce
// adapter: the handler does not run and the message is left for the
// dead-letter queue. Decorate returns an error for a nil argument or an
// invalid Config, and Poller.Run before it receives anything. The first
// message of each queue skipped under a body's hash is logged at Info (with
// how long after the first copy's done marker it came), naming
// Config.KeyAttribute and Config.Key; later ones at Debug. DefaultKey
// computes the default key of a message, and "jobonce key sqs" its stored
// key, to inspect it.
//
// # Sending
//
// Send publishes a message at most once per key within a window through
// Guard.Enqueue: standard queues do not deduplicate at all, and FIFO queues
// only for five minutes.
package sqsonce
