package sqsonce

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/nilcheck"
)

// HandlerFunc handles one SQS message. An error leaves the message in the
// queue for redelivery.
type HandlerFunc func(ctx context.Context, m types.Message) error

// Decorate returns a handler for a receive loop of your own. The handler
// runs h at most once per key and settles the message itself, so the
// caller must not delete it. Receive with the ApproximateReceiveCount
// system attribute, so the delays grow with the receives. With
// Config.KeyAttribute set, name that attribute in MessageAttributeNames.
// The handler does not renew the visibility while h runs; Poller does.
//
// The returned handler reports what happened:
//
//   - nil: h succeeded, or the key was already done. The message was
//     deleted.
//   - an error matching core.ErrRunning: another copy still ran after
//     Config.WaitRunning. The message is hidden for a growing delay.
//   - h's own error: the claim was released. The message is left for
//     redelivery, after Config.FailureDelay if set.
//   - an error matching core.ErrConflict or core.ErrInvalidKey: the
//     message is left for the dead-letter queue.
//   - an error matching core.ErrStoreUnavailable: nothing ran. The message
//     is hidden for Config.UnavailableDelay, growing with its receives.
//   - an error matching ctx.Err(): ctx ended before the claim was answered.
//     Nothing ran and the message is left as it is.
//   - an error matching ErrMissingAttribute, or another error for a message
//     it cannot key: the message is left unrun.
//   - an error saying the delete was not confirmed: the job is done. A copy
//     that comes back is deleted as a duplicate.
//
// The delete and the visibility change get 10s each, even after ctx ends.
// Decorate returns an error for a nil Guard, client or handler, an empty
// queue URL or an invalid Config. docs/sqs.md explains the receive
// settings and the delays.
func Decorate(g *core.Guard, client Client, queueURL string, h HandlerFunc, cfg *Config) (HandlerFunc, error) {
	o, err := cfg.options(g, queueURL, "Decorate")
	switch {
	case err != nil:
		return nil, err
	case nilcheck.IsNil(client):
		return nil, errors.New("jobonce: sqsonce: Decorate: client is nil")
	case h == nil:
		return nil, errors.New("jobonce: sqsonce: Decorate: handler is nil")
	}
	var (
		counted receives    // of messages without ApproximateReceiveCount
		warned  atomic.Bool // about a message without it
	)
	return func(ctx context.Context, m types.Message) error {
		start := time.Now()
		if m.ReceiptHandle == nil || *m.ReceiptHandle == "" {
			return errors.New("jobonce: sqsonce: message has no receipt handle")
		}
		id := aws.ToString(m.MessageId)
		err := o.messageAttributesAsked(m)
		var job core.Job
		if err == nil {
			job, err = o.job(m)
		}
		if err != nil {
			o.Logger.WarnContext(ctx, "jobonce: sqsonce: no key for the message; it is left unrun and comes back on each receive until the queue's redrive policy moves it to the dead-letter queue",
				"queue", o.queueName, "message_id", id, "error", err)
			return err
		}
		n, known := approximateReceiveCount(m)
		if !known {
			if id != "" {
				n = counted.add(id)
			} else {
				n = 1
			}
			if warned.CompareAndSwap(false, true) {
				o.Logger.WarnContext(ctx, "jobonce: sqsonce: message received without the ApproximateReceiveCount system attribute: receive with MessageSystemAttributeNames naming ApproximateReceiveCount (or All); until then the delays grow only with the receives this handler sees, so copies waiting on a long job may reach the dead-letter queue",
					"queue", o.queueName, "message_id", id)
			}
		}
		if !job.Unguarded {
			job.WaitUntil = o.waitUntil(ctx, time.Time{})
		}
		res, err := g.Run(ctx, job, func(ctx context.Context) ([]byte, error) {
			return nil, h(ctx, m)
		})
		dec := o.decide(res.Outcome, err, n, time.Since(start), false)
		if !known && dec.act == remove {
			counted.forget(id)
		}
		switch dec.act {
		case remove:
			_, derr := bounded(ctx, func(ctx context.Context) (*sqs.DeleteMessageOutput, error) {
				return client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(queueURL), ReceiptHandle: m.ReceiptHandle})
			})
			if derr != nil {
				return fmt.Errorf("jobonce: sqsonce: job done (%s) but its delete was not confirmed; if the message comes back, its next copy is a duplicate: %w", res.Outcome, derr)
			}
		case hide:
			_, verr := bounded(ctx, func(ctx context.Context) (*sqs.ChangeMessageVisibilityOutput, error) {
				return client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
					QueueUrl: aws.String(queueURL), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: seconds(dec.delay),
				})
			})
			if verr != nil {
				o.Logger.WarnContext(ctx, "jobonce: sqsonce: visibility change failed", "message_id", aws.ToString(m.MessageId), "error", verr)
				err = errors.Join(err, fmt.Errorf("jobonce: sqsonce: change visibility: %w", verr))
			}
		}
		return err
	}, nil
}

// errNoAnswer reports an SQS call that got no answer within sqsTimeout. It
// does not wrap context.DeadlineExceeded, so it is never taken for the end of
// the caller's own context.
var errNoAnswer = fmt.Errorf("jobonce: sqsonce: SQS gave no answer within %s", sqsTimeout)

// bounded makes one SQS call of Decorate, bounded by sqsTimeout even after
// ctx ends, as the Poller bounds its calls. A panicking client is reported as
// a failed call.
func bounded[T any](ctx context.Context, f func(ctx context.Context) (*T, error)) (out *T, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sqsTimeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, fmt.Errorf("jobonce: sqsonce: SQS client panicked: %v", p)
		}
	}()
	out, err = f(ctx)
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("%w (%v)", errNoAnswer, err)
	}
	return out, err
}
