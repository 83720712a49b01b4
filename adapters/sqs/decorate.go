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

// Decorate returns a handler for a receive loop of your own that runs h at
// most once per key (see the package doc for keys) and settles the message
// itself: the caller must not delete it. Receive with the
// ApproximateReceiveCount system attribute (and the key attribute in
// MessageAttributeNames if Config.KeyAttribute is set), so the delays can
// grow and the keys can be derived. A FIFO message's default key, its
// MessageId, needs no attribute.
//
// A message without ApproximateReceiveCount is warned about once per
// decorated handler; the handler then counts, per message id, the receives
// it sees itself, so the delays still grow in a single receive loop. The
// receives of other consumers do not raise that count: with several, a copy
// waiting on a long job is received more often and may reach the queue's
// maxReceiveCount.
//
// The returned handler reports what happened:
//
//   - nil: h succeeded (or the key was already done) and the message was
//     deleted.
//   - an error matching core.ErrRunning: another copy runs, and did not
//     finish within Config.WaitRunning, which the handler waited for it;
//     the message is hidden for a delay that grows with its receive count.
//     (When that copy finished meanwhile, the message was deleted as a
//     duplicate, or h ran if the copy's claim was released.)
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
// The delete and the visibility change are bounded by 10s each, even after
// ctx ends: a server that does not answer holds the handler no longer. When
// the job succeeded but the delete failed or got no answer, the error says
// the delete was not confirmed; the message may then come back, and its next
// copy is a duplicate and is deleted.
//
// When Config.KeyAttribute is set, a message that carries no message
// attributes at all (the receive's MessageAttributeNames must name the key
// attribute, or All) makes the handler return an error matching
// ErrMissingAttribute, and is left as it is, unrun. A FIFO message without
// a MessageId, whose key falls back to it, gets an error saying so and is
// left the same way. Each such message is logged at Warn with the setting
// to fix; it comes back on each receive until the queue's redrive policy
// moves it to the dead-letter queue (without one, until the queue's
// retention period ends and SQS deletes it). A panic in Config.Key or
// Config.Fingerprint is returned as an error the same way.
// Decorate returns an error naming the problem for a nil Guard, client or
// handler, an empty queue URL or an invalid Config.
func Decorate(g *core.Guard, client Client, queueURL string, h HandlerFunc, cfg *Config) (HandlerFunc, error) {
	o, err := cfg.options(g, queueURL, decorateNames)
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
