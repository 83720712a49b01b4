package jobkey

import (
	"net/url"
	"path"
	"strings"
)

// SQSQueueName returns the name of the queue at queueURL, its path's last
// element, and whether it has one; a queue name alone is its own name.
func SQSQueueName(queueURL string) (string, bool) {
	u, err := url.Parse(queueURL)
	if err != nil {
		return "", false
	}
	name := path.Base(u.Path)
	if name == "" || name == "/" || name == "." {
		return "", false
	}
	return name, true
}

// SQSFIFO reports whether the queue named name is a FIFO queue: its name ends
// in ".fifo".
func SQSFIFO(name string) bool { return strings.HasSuffix(name, ".fifo") }

// SQSFIFOKey returns the key of a message on a FIFO queue: its queue's name,
// ":id:" and its MessageId. SQS queue names hold no ':', so the first ':'
// ends the name and no two pairs share a key; a body's key (the name, ':'
// and a fingerprint) never holds a second ':'.
func SQSFIFOKey(queue, messageID string) string {
	return queue + ":id:" + messageID
}
