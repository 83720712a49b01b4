package sqsonce

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"
)

const testFIFOQueueURL = "http://127.0.0.1:4566/000000000000/orders.fifo"

func fifoMessage(body, group, dedup string) types.Message {
	attrs := map[string]string{}
	if group != "" {
		attrs[attrGroup] = group
	}
	if dedup != "" {
		attrs[attrDeduplication] = dedup
	}
	return types.Message{Body: aws.String(body), Attributes: attrs}
}

func TestFIFOKeyNamesTheGroup(t *testing.T) {
	t.Parallel()
	o := testOptionsFor(t, testFIFOQueueURL, nil)
	a := mustJob(t, o, fifoMessage("pay 5", "account-1", "d"))
	b := mustJob(t, o, fifoMessage("pay 5", "account-2", "d"))
	require.NotEqual(t, a.Key, b.Key, "one deduplication id in two groups (DeduplicationScope=messageGroup) names two messages")
	require.Equal(t, a.Key, mustJob(t, o, fifoMessage("pay 5", "account-1", "d")).Key, "a copy has its message's key")
	require.NotEqual(t, a.Key, mustJob(t, o, fifoMessage("pay 5", "account-1", "e")).Key)
}

func TestFIFOKeyIsUnambiguous(t *testing.T) {
	t.Parallel()
	triples := [][3]string{
		{"q.fifo", "a:b", "c"}, {"q.fifo", "a", "b:c"}, {"q.fifo", "a:", "b"}, {"q.fifo", "a", ":b"},
		{"q.fifo", "1:a", "b"}, {"q.fifo", "1", "a:b"}, {"q.fifo", "", "1:a:b"}, {"q.fifo", "a", "1:a:b"},
		{"q.fifo:1", "a", "b"}, {"q.fifo", "fifo:1:a", "b"}, {"q.fifo", "10:aaaaaaaaaa", "x"}, {"q.fifo", "1", "0:aaaaaaaaaa:x"},
	}
	seen := map[string][3]string{}
	for _, tr := range triples {
		k := fifoKey(tr[0], tr[1], tr[2])
		prev, dup := seen[k]
		require.False(t, dup, "%q and %q share the key %q", prev, tr, k)
		seen[k] = tr
	}
}

func TestFIFOKeyWithoutItsAttributesIsAnError(t *testing.T) {
	t.Parallel()
	o := testOptionsFor(t, testFIFOQueueURL, nil)
	for _, tc := range []struct {
		m       types.Message
		missing string
	}{
		{fifoMessage("pay 5", "", ""), "MessageDeduplicationId and MessageGroupId"},
		{fifoMessage("pay 5", "account-1", ""), "MessageDeduplicationId,"},
		{fifoMessage("pay 5", "", "d"), ": MessageGroupId,"},
	} {
		_, err := o.job(tc.m)
		require.ErrorIs(t, err, ErrMissingAttribute)
		require.ErrorContains(t, err, tc.missing)
		require.ErrorContains(t, err, "MessageSystemAttributeNames")
	}
	// A key attribute the message carries needs neither.
	attr := fifoMessage("pay 5", "", "")
	attr.MessageAttributes = map[string]types.MessageAttributeValue{"job": {DataType: aws.String("String"), StringValue: aws.String("pay-5")}}
	require.Equal(t, "pay-5", mustJob(t, testOptionsFor(t, testFIFOQueueURL, &Config{KeyAttribute: "job"}), attr).Key)
	// A standard queue has no deduplication ids: the body's hash is its key.
	require.Equal(t, "orders", mustJob(t, testOptions(t, nil), fifoMessage("pay 5", "", "")).Kind)
}

func TestPanickingKeyIsAnError(t *testing.T) {
	t.Parallel()
	for _, cfg := range []*Config{
		{Key: func(types.Message) string { panic("no key") }},
		{Fingerprint: func(types.Message) string { panic("no fingerprint") }},
	} {
		_, err := testOptions(t, cfg).job(types.Message{Body: aws.String("x")})
		require.ErrorContains(t, err, "panicked")
	}
}
