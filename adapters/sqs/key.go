package sqsonce

import (
	"strconv"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/jobonce/jobonce/core"
)

// System attribute names the adapter reads from received messages.
const (
	attrReceiveCount  = string(types.MessageSystemAttributeNameApproximateReceiveCount)
	attrDeduplication = string(types.MessageSystemAttributeNameMessageDeduplicationId)
	attrGroup         = string(types.MessageSystemAttributeNameMessageGroupId)
)

// job returns the claim request for a message: its key and fingerprint.
func (o *options) job(m types.Message) core.Job {
	return core.Job{Key: o.key(m), Fingerprint: o.fingerprint(m)}
}

func (o *options) key(m types.Message) string {
	if o.Key != nil {
		return o.Key(m)
	}
	if o.KeyAttribute != "" {
		if v, ok := m.MessageAttributes[o.KeyAttribute]; ok {
			if v.StringValue != nil && *v.StringValue != "" {
				return *v.StringValue
			}
			if len(v.BinaryValue) > 0 {
				return string(v.BinaryValue)
			}
		}
	}
	if id := m.Attributes[attrDeduplication]; id != "" {
		return o.queueName + ":dedup:" + id
	}
	return o.queueName + ":" + core.Fingerprint(body(m))
}

func (o *options) fingerprint(m types.Message) string {
	if o.Fingerprint != nil {
		return o.Fingerprint(m)
	}
	return core.Fingerprint(body(m))
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
