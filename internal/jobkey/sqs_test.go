package jobkey_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/internal/jobkey"
)

func TestSQSFIFOKeyIsUnambiguous(t *testing.T) {
	pairs := [][2]string{
		{"q.fifo", "a:b"}, {"q.fifo", "a"}, {"q.fifo", ":a"}, {"q.fifo", "id:a"}, {"q.fifo", "a:id:b"},
		{"q-a.fifo", "id:b"}, {"q_a.fifo", "b"}, {"q.fifo", ""}, {"qa.fifo", "b"}, {"q.fifoa", "b"},
	}
	seen := map[string][2]string{}
	for _, pr := range pairs {
		k := jobkey.SQSFIFOKey(pr[0], pr[1])
		prev, dup := seen[k]
		require.False(t, dup, "%q and %q share the key %q", prev, pr, k)
		seen[k] = pr
	}
}

func TestSQSQueueNameIsTheURLsLastElement(t *testing.T) {
	for in, want := range map[string]string{
		"https://sqs.us-east-1.amazonaws.com/123456789012/orders": "orders",
		"http://127.0.0.1:4566/000000000000/orders.fifo":          "orders.fifo",
		"orders": "orders",
		"https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo/": "orders.fifo",
	} {
		got, ok := jobkey.SQSQueueName(in)
		require.True(t, ok, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "https://sqs.us-east-1.amazonaws.com/", "%zz"} {
		_, ok := jobkey.SQSQueueName(in)
		require.False(t, ok, in)
	}
	require.True(t, jobkey.SQSFIFO("orders.fifo"))
	require.False(t, jobkey.SQSFIFO("orders"))
}
