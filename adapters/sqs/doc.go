// Package sqsonce runs each Amazon SQS message's job once, on top of a
// jobonce Guard. It claims a message's key before the handler runs and
// records a done marker after it. SQS's visibility timeout holds back
// whatever must wait.
//
//	import sqsonce "github.com/jobonce/jobonce/adapters/sqs"
//
// # Getting started
//
// Poller is a complete consumer:
//
//	p, err := sqsonce.NewPoller(guard, sqsClient, queueURL, handle, nil)
//	// ...
//	err = p.Run(ctx)
//
// Decorate wraps a handler for a receive loop of your own. Send publishes a
// message at most once per key within a window.
//
// # Keys
//
// On a standard queue, a message's default key is the queue's name and a
// hash of its body. A message sent again with the same body within the
// Guard's Retention is skipped as a copy. On a FIFO queue, the default key
// is the queue and the MessageId, so every message sent runs. Work that
// repeats on purpose with one body names its key instead:
//
//	cfg := &sqsonce.Config{KeyAttribute: "job"}                                                    // the sender names the key in a message attribute
//	cfg := &sqsonce.Config{Key: func(m types.Message) string { return aws.ToString(m.MessageId) }} // every message sent runs once
//
// Decorate takes the Config; a Poller takes it as PollerConfig.Config.
// docs/sqs.md explains the keys, what happens to each message, batches,
// FIFO groups and stopping.
package sqsonce
