package sqsonce

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
)

const testFIFOQueueURL = "http://127.0.0.1:4566/000000000000/orders.fifo"

// fifoMessage returns a message as a receive without attributes gets it: a
// body and a MessageId, no system attributes.
func fifoMessage(body, messageID string) types.Message {
	return types.Message{Body: aws.String(body), MessageId: aws.String(messageID)}
}

func TestFIFOKeyIsTheQueueAndTheMessageID(t *testing.T) {
	t.Parallel()
	o := testOptionsFor(t, testFIFOQueueURL, nil)
	a := mustJob(t, o, fifoMessage("refresh cache", "id-1"))
	require.Equal(t, "orders.fifo:id:id-1", a.Key)
	require.Equal(t, a.Key, mustJob(t, o, fifoMessage("refresh cache", "id-1")).Key, "a redelivery has its message's key")
	require.NotEqual(t, a.Key, mustJob(t, o, fifoMessage("refresh cache", "id-2")).Key,
		"one body (one content-based deduplication id) sent again after SQS forgot it is a new message")
	require.NotEqual(t, a.Key, mustJob(t, testOptionsFor(t, "http://127.0.0.1:4566/000000000000/invoices.fifo", nil), fifoMessage("refresh cache", "id-1")).Key,
		"one message id on two queues")

	withAttrs := fifoMessage("refresh cache", "id-1")
	withAttrs.Attributes = map[string]string{"MessageDeduplicationId": "d", attrGroup: "g"}
	require.Equal(t, a, mustJob(t, o, withAttrs), "the system attributes do not change the key")
	require.Equal(t, core.Fingerprint([]byte("refresh cache")), a.Fingerprint, "the body's fingerprint is stored with the key")
}

func TestFIFOKeyWithoutAMessageIDIsAnError(t *testing.T) {
	t.Parallel()
	o := testOptionsFor(t, testFIFOQueueURL, nil)
	for _, m := range []types.Message{fifoMessage("pay 5", ""), {Body: aws.String("pay 5")}} {
		_, err := o.job(m)
		require.ErrorContains(t, err, "no MessageId")
		require.ErrorContains(t, err, "orders.fifo")
		require.ErrorContains(t, err, "Config.Key")
		require.NotErrorIs(t, err, ErrMissingAttribute)
	}
	// A key attribute the message carries, or Config.Key, needs none.
	attr := fifoMessage("pay 5", "")
	attr.MessageAttributes = map[string]types.MessageAttributeValue{"job": {DataType: aws.String("String"), StringValue: aws.String("pay-5")}}
	require.Equal(t, "pay-5", mustJob(t, testOptionsFor(t, testFIFOQueueURL, &Config{KeyAttribute: "job"}), attr).Key)
	require.Equal(t, "k", mustJob(t, testOptionsFor(t, testFIFOQueueURL, &Config{Key: func(types.Message) string { return "k" }}), attr).Key)
	// A standard queue's default key is the body's hash, with or without an id.
	require.Equal(t, "orders:"+core.Fingerprint([]byte("pay 5")), mustJob(t, testOptions(t, nil), fifoMessage("pay 5", "")).Key)
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

// TestOnlyTheBodyHashIsADefaultKey: a standard queue's key made of the
// body's hash is marked Job.DefaultKey, so its first skip is logged at Info;
// a FIFO message's MessageId, a key attribute and Config.Key are not.
func TestOnlyTheBodyHashIsADefaultKey(t *testing.T) {
	t.Parallel()
	body := fifoMessage("refresh cache", "id-1")
	require.True(t, mustJob(t, testOptions(t, nil), body).DefaultKey, "a standard queue's body hash")
	require.False(t, mustJob(t, testOptionsFor(t, testFIFOQueueURL, nil), body).DefaultKey, "a FIFO message's MessageId")
	require.False(t, mustJob(t, testOptions(t, &Config{Key: func(types.Message) string { return "k" }}), body).DefaultKey)

	attr := fifoMessage("refresh cache", "id-1")
	attr.MessageAttributes = map[string]types.MessageAttributeValue{"job": {DataType: aws.String("String"), StringValue: aws.String("refresh-1")}}
	byAttribute := testOptions(t, &Config{KeyAttribute: "job"})
	require.False(t, mustJob(t, byAttribute, attr).DefaultKey, "a key attribute")
	other := fifoMessage("refresh cache", "id-1")
	other.MessageAttributes = map[string]types.MessageAttributeValue{"tenant": {DataType: aws.String("String"), StringValue: aws.String("a")}}
	require.True(t, mustJob(t, byAttribute, other).DefaultKey, "without the attribute, the body hash again")
}
