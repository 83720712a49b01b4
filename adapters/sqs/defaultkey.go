package sqsonce

import (
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/jobonce/jobonce/internal/jobkey"
)

// DefaultKey returns the key Decorate and the Poller give m under the
// default Config. On a FIFO queue, it is the queue's name, ":id:" and the
// MessageId. On a standard queue, it is the queue's name, ":" and
// core.Fingerprint of the body. It returns an error when queueURL names no
// queue, or for a FIFO message without a MessageId.
func DefaultKey(queueURL string, m types.Message) (string, error) {
	name, ok := jobkey.SQSQueueName(queueURL)
	if !ok {
		return "", fmt.Errorf("jobonce: sqsonce: DefaultKey: queue URL %q has no queue name", queueURL)
	}
	o := &options{queueName: name, fifo: jobkey.SQSFIFO(name)}
	job, err := o.job(m)
	if err != nil {
		return "", err
	}
	return job.Key, nil
}
