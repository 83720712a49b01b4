package sqsonce

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/nilcheck"
)

// Send sends in at most once per key within window, through Guard.Enqueue.
// It reports whether this call sent the message. False with a nil error
// means the key was sent within the window already; out is then nil. If
// the send fails, the claim is released, so a retry can send at once. An
// empty key is replaced by core.Fingerprint of the message body.
//
// While another call sends the key, the error matches core.ErrRunning, with
// a core.RetryAfter hint. When the store cannot be reached, it matches
// core.ErrStoreUnavailable, and nothing is sent unless the Guard fails
// open. When ctx ends before the store answers, it matches ctx.Err(). A send
// error comes back unchanged. Send returns an error for a nil Guard or
// client, or an input without a QueueUrl.
func Send(ctx context.Context, g *core.Guard, client Sender, key string, window time.Duration, in *sqs.SendMessageInput) (sent bool, out *sqs.SendMessageOutput, err error) {
	switch {
	case g == nil:
		return false, nil, errors.New("jobonce: sqsonce: Send: Guard is nil")
	case nilcheck.IsNil(client):
		return false, nil, errors.New("jobonce: sqsonce: Send: client is nil")
	case in == nil || in.QueueUrl == nil || *in.QueueUrl == "":
		return false, nil, errors.New("jobonce: sqsonce: Send: input has no QueueUrl")
	}
	if key == "" && in.MessageBody != nil {
		key = core.Fingerprint([]byte(*in.MessageBody))
	}
	sent, err = g.Enqueue(ctx, key, window, func(ctx context.Context) error {
		var serr error
		out, serr = client.SendMessage(ctx, in)
		return serr
	})
	if !sent {
		out = nil
	}
	return sent, out, err
}
