package sqsonce

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/nilcheck"
)

// Send sends in at most once per key within window, through Guard.Enqueue:
// the key is claimed while the message is sent and marked for the window
// once it is; if the send fails, the claim is released so a retry can send
// at once. It reports whether this call sent the message; false with a nil
// error means the key was sent within the window already, and out is then
// nil.
//
// An empty key is replaced by the hash of the message body (core.Fingerprint).
// The error matches core.ErrRunning, with a core.RetryAfter hint, while
// another call is sending the key (nothing is sent: try again after the
// hint); core.ErrStoreUnavailable when the store cannot be reached
// (nothing is sent unless the Guard fails open), and ctx.Err() when ctx ends
// before the store answered (nothing is sent); a send error comes back
// unchanged.
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
