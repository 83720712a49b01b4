package sqsonce

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/jobkey"
)

// System attribute names the adapter reads from received messages.
const (
	attrReceiveCount  = string(types.MessageSystemAttributeNameApproximateReceiveCount)
	attrDeduplication = string(types.MessageSystemAttributeNameMessageDeduplicationId)
	attrGroup         = string(types.MessageSystemAttributeNameMessageGroupId)
)

// ErrMissingAttribute reports a message received without an attribute its
// key needs, because the receive did not ask for it: on a FIFO queue the
// system attributes MessageDeduplicationId and MessageGroupId, or, when
// Config.KeyAttribute is set, the message attributes. The message is left as
// it is, unrun: it comes back on each receive until the queue's redrive
// policy moves it to the dead-letter queue.
var ErrMissingAttribute = errors.New("jobonce: sqsonce: message lacks an attribute its key needs")

// job returns the job of a message: its key and fingerprint. It returns an
// error matching ErrMissingAttribute for a FIFO message whose default key
// cannot be derived, and an error when Config.Key or Config.Fingerprint
// panics.
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
	return jobkey.Job("sqs", o.queueName, body(m), key, named, fp), nil
}

// key returns the key that Config.Key, the key attribute or the FIFO
// deduplication id and group give, in that order, and whether one did. On a
// FIFO queue a message that reaches the last rule must carry both system
// attributes: its key never falls back to the body, which would skip a
// message the producer declared distinct.
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
	id, group := m.Attributes[attrDeduplication], m.Attributes[attrGroup]
	if o.fifo {
		var missing []string
		if id == "" {
			missing = append(missing, attrDeduplication)
		}
		if group == "" {
			missing = append(missing, attrGroup)
		}
		if len(missing) > 0 {
			return "", false, fmt.Errorf("%w: %s, on FIFO queue %s: receive with MessageSystemAttributeNames naming %s and %s (or All)",
				ErrMissingAttribute, strings.Join(missing, " and "), o.queueName, attrDeduplication, attrGroup)
		}
	}
	if id != "" {
		return fifoKey(o.queueName, group, id), true, nil
	}
	return "", false, nil
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

// fifoKey returns the key of a FIFO message: its queue, group and
// deduplication id. The group is length-prefixed, so no separator inside an
// id makes two different triples one key; SQS queue names hold no ':'.
func fifoKey(queue, group, id string) string {
	return queue + ":fifo:" + strconv.Itoa(len(group)) + ":" + group + ":" + id
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
