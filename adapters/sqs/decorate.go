package sqsonce

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/jobonce/jobonce/core"
)

// HandlerFunc handles one SQS message. An error leaves the message in the
// queue for redelivery.
type HandlerFunc func(ctx context.Context, m types.Message) error

// Decorate returns a handler for a receive loop of your own that runs h at
// most once per key (see the package doc for keys) and settles the message
// itself: the caller must not delete it. Receive with the
// ApproximateReceiveCount system attribute (and MessageDeduplicationId for
// FIFO keys, and the key attribute if Config.KeyAttribute is set), so the
// delays can grow and the keys can be derived.
//
// The returned handler reports what happened:
//
//   - nil: h succeeded (or the key was already done) and the message was
//     deleted.
//   - an error matching core.ErrRunning: another copy runs; the message is
//     hidden for a delay that grows with its receive count.
//   - h's own error: the claim was released and the message left for
//     redelivery (after Config.FailureDelay, if set).
//   - an error matching core.ErrConflict or core.ErrInvalidKey: the message
//     is left for the dead-letter queue.
//   - an error matching core.ErrStoreUnavailable: nothing ran; the message
//     is hidden for Config.UnavailableDelay, growing with its receive count.
//   - an error matching ctx.Err() (context.Canceled or
//     context.DeadlineExceeded): ctx ended before the claim was answered;
//     nothing ran, no claim is held, and the message is left as it is, to
//     come back when the visibility its receive set lapses. It is not a
//     store outage, and it runs no job even when the Guard fails open.
//
// Decorate does not renew the message's visibility while h runs: a job that
// outlasts the queue's visibility timeout is received again, and that copy
// finds it running and is hidden with growing delays. Poller renews it.
//
// When the job succeeded but the delete failed, the error says so; the next
// copy of the message is then a duplicate and is deleted. Decorate returns
// an error naming the problem for a nil Guard, client or handler, an empty
// queue URL or an invalid Config.
func Decorate(g *core.Guard, client Client, queueURL string, h HandlerFunc, cfg *Config) (HandlerFunc, error) {
	o, err := cfg.options(g, queueURL)
	switch {
	case err != nil:
		return nil, err
	case client == nil:
		return nil, errors.New("jobonce: sqsonce: Decorate: client is nil")
	case h == nil:
		return nil, errors.New("jobonce: sqsonce: Decorate: handler is nil")
	}
	return func(ctx context.Context, m types.Message) error {
		start := time.Now()
		if m.ReceiptHandle == nil || *m.ReceiptHandle == "" {
			return errors.New("jobonce: sqsonce: message has no receipt handle")
		}
		res, err := g.Run(ctx, o.job(m), func(ctx context.Context) ([]byte, error) {
			return nil, h(ctx, m)
		})
		dec := o.decide(res.Outcome, err, receiveCount(m), time.Since(start), false)
		switch dec.act {
		case remove:
			_, derr := client.DeleteMessage(context.WithoutCancel(ctx), &sqs.DeleteMessageInput{
				QueueUrl: aws.String(queueURL), ReceiptHandle: m.ReceiptHandle,
			})
			if derr != nil {
				return fmt.Errorf("jobonce: sqsonce: job done (%s) but the message was not deleted; its next copy will be a duplicate: %w", res.Outcome, derr)
			}
		case hide:
			_, verr := client.ChangeMessageVisibility(context.WithoutCancel(ctx), &sqs.ChangeMessageVisibilityInput{
				QueueUrl: aws.String(queueURL), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: seconds(dec.delay),
			})
			if verr != nil {
				o.Logger.WarnContext(ctx, "jobonce: sqsonce: visibility change failed", "message_id", aws.ToString(m.MessageId), "error", verr)
				err = errors.Join(err, fmt.Errorf("jobonce: sqsonce: change visibility: %w", verr))
			}
		}
		return err
	}, nil
}
