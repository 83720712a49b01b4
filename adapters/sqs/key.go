package sqsonce

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/jobkey"
)

// System attribute names the adapter reads from received messages.
const (
	attrReceiveCount = string(types.MessageSystemAttributeNameApproximateReceiveCount)
	attrGroup        = string(types.MessageSystemAttributeNameMessageGroupId)
)

// ErrMissingAttribute reports a message without the message attribute its
// key needs: Config.KeyAttribute is set, but the message carries no
// message attributes at all, usually because the receive did not ask for
// them. The message is left unrun. It comes back until the queue's redrive
// policy moves it.
var ErrMissingAttribute = errors.New("jobonce: sqsonce: message lacks an attribute its key needs")

// job returns the job of a message: its key and fingerprint. It returns an
// error for a FIFO message without a MessageId whose key falls back to it,
// and when Config.Key or Config.Fingerprint panics.
func (o *options) job(m types.Message) (job core.Job, err error) {
	defer func() {
		if p := recover(); p != nil {
			job, err = core.Job{}, fmt.Errorf("jobonce: sqsonce: Config.Key or Config.Fingerprint panicked: %v", p)
		}
	}()
	key, named, err := o.key(m)
	if err != nil {
		return core.Job{}, err
	}
	var fp func() string
	if o.Fingerprint != nil {
		fp = func() string { return o.Fingerprint(m) }
	}
	job = jobkey.Job("sqs", o.queueName, body(m), key, named, fp)
	if job.DefaultKey {
		job.KeyHint = keyHint
	}
	return job, nil
}

// keyHint is what the first skip under the default key says of it.
var keyHint = core.KeyHint{Key: "queue and body hash", Settings: "sqsonce: set Config.KeyAttribute or Config.Key"}

// key returns the key that Config.Key, the key attribute or (on a FIFO
// queue) the message id gives, in that order, and whether one did. A FIFO
// message is keyed by its MessageId, never by its deduplication id: SQS
// forgets a deduplication id after five minutes, and the same id sent later
// is a new message, while every copy SQS delivers of one message (a
// redelivery) keeps its MessageId. A FIFO message without one is an error,
// never keyed by its body.
func (o *options) key(m types.Message) (string, bool, error) {
	if o.Key != nil {
		return o.Key(m), true, nil
	}
	if o.KeyAttribute != "" {
		if v, ok := m.MessageAttributes[o.KeyAttribute]; ok {
			if v.StringValue != nil && *v.StringValue != "" {
				return *v.StringValue, true, nil
			}
			if len(v.BinaryValue) > 0 {
				return string(v.BinaryValue), true, nil
			}
		}
	}
	if !o.fifo {
		return "", false, nil
	}
	id := aws.ToString(m.MessageId)
	if id == "" {
		return "", false, fmt.Errorf("jobonce: sqsonce: message on FIFO queue %s has no MessageId, which its default key needs; it is left unrun (set Config.Key or Config.KeyAttribute to key it otherwise)", o.queueName)
	}
	return jobkey.SQSFIFOKey(o.queueName, id), true, nil
}

// messageAttributesAsked returns an error matching ErrMissingAttribute when
// Config.KeyAttribute names the key but the message carries no message
// attributes at all: the sign of a receive without MessageAttributeNames,
// under which every message would fall back to another key. A message with
// other attributes but not the key attribute falls back as Config says. The
// Poller asks for every attribute, so only Decorate checks.
func (o *options) messageAttributesAsked(m types.Message) error {
	if o.Key != nil || o.KeyAttribute == "" || len(m.MessageAttributes) > 0 {
		return nil
	}
	return fmt.Errorf("%w: Config.KeyAttribute %q, on queue %s: the message carries no message attributes; receive with MessageAttributeNames naming %q (or All)",
		ErrMissingAttribute, o.KeyAttribute, o.queueName, o.KeyAttribute)
}

func body(m types.Message) []byte {
	if m.Body == nil {
		return nil
	}
	return []byte(*m.Body)
}

// receiveCount returns the message's ApproximateReceiveCount, or 1 when the
// receive did not ask for it.
func receiveCount(m types.Message) int {
	if n, ok := approximateReceiveCount(m); ok {
		return n
	}
	return 1
}

// approximateReceiveCount returns the message's ApproximateReceiveCount and
// whether the message carries a valid one.
func approximateReceiveCount(m types.Message) (int, bool) {
	n, err := strconv.Atoi(m.Attributes[attrReceiveCount])
	if err != nil || n < 1 {
		return 0, false
	}
	return n, true
}
