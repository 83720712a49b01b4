package sqsonce

import (
	"strconv"

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

// job returns the job of a message: its key and fingerprint.
func (o *options) job(m types.Message) core.Job {
	key, named := o.key(m)
	var fp func() string
	if o.Fingerprint != nil {
		fp = func() string { return o.Fingerprint(m) }
	}
	return jobkey.Job("sqs", o.queueName, body(m), key, named, fp)
}

// key returns the key that Config.Key, the key attribute or the FIFO
// deduplication id give, in that order, and whether one did.
func (o *options) key(m types.Message) (string, bool) {
	if o.Key != nil {
		return o.Key(m), true
	}
	if o.KeyAttribute != "" {
		if v, ok := m.MessageAttributes[o.KeyAttribute]; ok {
			if v.StringValue != nil && *v.StringValue != "" {
				return *v.StringValue, true
			}
			if len(v.BinaryValue) > 0 {
				return string(v.BinaryValue), true
			}
		}
	}
	if id := m.Attributes[attrDeduplication]; id != "" {
		return o.queueName + ":dedup:" + id, true
	}
	return "", false
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
	n, err := strconv.Atoi(m.Attributes[attrReceiveCount])
	if err != nil || n < 1 {
		return 1
	}
	return n
}
