package lambdaonce_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	lambdaonce "github.com/jobonce/jobonce/adapters/lambda"
	"github.com/jobonce/jobonce/internal/testenv"
)

func TestMain(m *testing.M) {
	os.Exit(testenv.RunExamples(m, testenv.NeedRedis, testenv.NeedSQS))
}

// newSQS returns a client for the test SQS server (fauxqs).
func newSQS(t testing.TB) *sqs.Client {
	t.Helper()
	testenv.Short(t)
	return sqs.New(sqs.Options{
		BaseEndpoint: aws.String(testenv.SQSEndpoint(t)),
		Region:       "us-east-1",
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test", Source: "jobonce tests"}, nil
		}),
	})
}

// testQueue is a queue of the test's own, deleted at cleanup.
type testQueue struct {
	url, arn string
	fifo     bool
}

// urlOf is a Config.QueueURL for the test server.
func (q testQueue) urlOf(arn string) string {
	if arn == q.arn {
		return q.url
	}
	return ""
}

// createQueue creates a queue with the visibility timeout given in seconds,
// a FIFO queue when fifo is set.
func createQueue(t testing.TB, c *sqs.Client, visibility int, fifo bool) testQueue {
	t.Helper()
	ctx := context.Background()
	name := "jobonce-lambda-" + testenv.RandomID(8)
	attrs := map[string]string{"VisibilityTimeout": strconv.Itoa(visibility)}
	if fifo {
		name += ".fifo"
		attrs["FifoQueue"] = "true"
	}
	out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	require.NoError(t, err)
	q := testQueue{url: aws.ToString(out.QueueUrl), fifo: fifo}
	t.Cleanup(func() { _, _ = c.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(q.url)}) })
	a, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(q.url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	require.NoError(t, err)
	q.arn = a.Attributes[string(types.QueueAttributeNameQueueArn)]
	require.NotEmpty(t, q.arn)
	return q
}

// sendAll sends bodies in batches of ten, in order; on a FIFO queue each to
// the group groupOf gives, with a deduplication id of its own.
func sendAll(t testing.TB, c *sqs.Client, q testQueue, bodies []string, groupOf func(body string) string) {
	t.Helper()
	for n := 0; len(bodies) > 0; n++ {
		k := min(len(bodies), 10)
		entries := make([]types.SendMessageBatchRequestEntry, k)
		for i, b := range bodies[:k] {
			entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(b)}
			if q.fifo {
				entries[i].MessageGroupId = aws.String(groupOf(b))
				entries[i].MessageDeduplicationId = aws.String(fmt.Sprintf("%d-%d-%s", n, i, testenv.RandomID(6)))
			}
		}
		out, err := c.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(q.url), Entries: entries})
		require.NoError(t, err)
		require.Empty(t, out.Failed)
		bodies = bodies[k:]
	}
}

// receive receives up to ten messages as an event source mapping does, with
// every attribute, waiting up to wait for the first.
func receive(ctx context.Context, c *sqs.Client, q testQueue, wait int32) (events.SQSEvent, error) {
	out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(q.url), MaxNumberOfMessages: 10, WaitTimeSeconds: wait,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	})
	if err != nil {
		return events.SQSEvent{}, err
	}
	return event(q, out.Messages), nil
}

// receiveN receives until it holds n messages, in one event.
func receiveN(t testing.TB, c *sqs.Client, q testQueue, n int) events.SQSEvent {
	t.Helper()
	var ev events.SQSEvent
	for tries := 0; len(ev.Records) < n; tries++ {
		require.Less(t, tries, 50, "received %d of %d messages", len(ev.Records), n)
		got, err := receive(context.Background(), c, q, 1)
		require.NoError(t, err)
		ev.Records = append(ev.Records, got.Records...)
	}
	require.Len(t, ev.Records, n)
	return ev
}

// event builds the event Lambda's event source mapping would deliver for
// messages received from q.
func event(q testQueue, msgs []types.Message) events.SQSEvent {
	ev := events.SQSEvent{Records: make([]events.SQSMessage, len(msgs))}
	for i, m := range msgs {
		r := events.SQSMessage{
			MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle),
			Body: aws.ToString(m.Body), Md5OfBody: aws.ToString(m.MD5OfBody),
			Attributes: m.Attributes, EventSourceARN: q.arn, EventSource: "aws:sqs", AWSRegion: "us-east-1",
		}
		if len(m.MessageAttributes) > 0 {
			r.MessageAttributes = map[string]events.SQSMessageAttribute{}
			for k, a := range m.MessageAttributes {
				r.MessageAttributes[k] = events.SQSMessageAttribute{
					DataType: aws.ToString(a.DataType), StringValue: a.StringValue, BinaryValue: a.BinaryValue,
				}
			}
		}
		ev.Records[i] = r
	}
	return ev
}

// failed returns the message ids of a response's BatchItemFailures, sorted.
func failed(resp events.SQSEventResponse) []string {
	ids := make([]string, 0, len(resp.BatchItemFailures))
	for _, f := range resp.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	slices.Sort(ids)
	return ids
}

// idsOf returns the message ids of the event's records whose bodies are
// given, sorted.
func idsOf(ev events.SQSEvent, bodies ...string) []string {
	var ids []string
	for _, r := range ev.Records {
		if slices.Contains(bodies, r.Body) {
			ids = append(ids, r.MessageId)
		}
	}
	slices.Sort(ids)
	return ids
}

// esm is a small event source mapping: it receives a batch, invokes the
// handler with it under a deadline as Lambda does, and deletes the records
// that succeeded (none when the handler returned an error).
type esm struct {
	c       *sqs.Client
	q       testQueue
	h       lambdaonce.Handler
	timeout time.Duration // the function's timeout
}

// poll runs one receive and invocation, and returns how many records it
// received.
func (e esm) poll(ctx context.Context) (int, error) {
	ev, err := receive(ctx, e.c, e.q, 1)
	if err != nil || len(ev.Records) == 0 {
		return 0, err
	}
	ictx, cancel := context.WithTimeout(ctx, e.timeout)
	resp, herr := e.h(ictx, ev)
	cancel()
	if herr != nil {
		return len(ev.Records), nil
	}
	keep := map[string]bool{}
	for _, f := range resp.BatchItemFailures {
		keep[f.ItemIdentifier] = true
	}
	var entries []types.DeleteMessageBatchRequestEntry
	for i, r := range ev.Records {
		if !keep[r.MessageId] {
			entries = append(entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(r.ReceiptHandle)})
		}
	}
	if len(entries) > 0 {
		if _, err := e.c.DeleteMessageBatch(context.WithoutCancel(ctx), &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(e.q.url), Entries: entries}); err != nil {
			return len(ev.Records), err
		}
	}
	return len(ev.Records), nil
}

// run polls until ctx ends, on n goroutines (concurrent invocations).
func (e esm) run(ctx context.Context, n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				_, _ = e.poll(ctx)
			}
		})
	}
	wg.Wait()
}

// depth returns a queue's visible and in-flight message counts.
func depth(t testing.TB, c *sqs.Client, url string) (visible, inflight int) {
	t.Helper()
	out, err := c.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		},
	})
	require.NoError(t, err)
	visible, err = strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)])
	require.NoError(t, err)
	inflight, err = strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
	require.NoError(t, err)
	return visible, inflight
}

// drained reports whether the queue holds no message, visible or not.
func drained(t testing.TB, c *sqs.Client, url string) bool {
	v, f := depth(t, c, url)
	return v+f == 0
}

// effects counts effects per job id in a Redis hash.
type effects struct {
	rdb *redis.Client
	key string
}

func newEffects(rdb *redis.Client, prefix string) effects {
	return effects{rdb: rdb, key: prefix + "effects"}
}

func (e effects) record(ctx context.Context, id string) error {
	return e.rdb.HIncrBy(context.WithoutCancel(ctx), e.key, id, 1).Err()
}

// count returns how many ids have effects, or -1 when Redis fails.
func (e effects) count() int {
	n, err := e.rdb.HLen(context.Background(), e.key).Result()
	if err != nil {
		return -1
	}
	return int(n)
}

// requireOnce requires exactly one effect for every id in ids, and no others.
func (e effects) requireOnce(t testing.TB, ids []string) {
	t.Helper()
	m, err := e.rdb.HGetAll(context.Background(), e.key).Result()
	require.NoError(t, err)
	var dup, missing []string
	for _, id := range ids {
		switch m[id] {
		case "":
			missing = append(missing, id)
		case "1":
		default:
			dup = append(dup, id+"×"+m[id])
		}
	}
	require.Empty(t, dup, "duplicate effects")
	require.Empty(t, missing, "missing effects")
	require.Len(t, m, len(ids), "effects for unknown ids")
}

// visibilities records the visibility changes a Client makes, and its
// calls.
type visibilities struct {
	lambdaonce.Client
	mu    sync.Mutex
	set   map[string]int32 // receipt handle → visibility
	calls int
}

func recordVisibility(c lambdaonce.Client) *visibilities {
	return &visibilities{Client: c, set: map[string]int32{}}
}

func (v *visibilities) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	out, err := v.Client.ChangeMessageVisibilityBatch(ctx, in, opts...)
	v.mu.Lock()
	defer v.mu.Unlock()
	v.calls++
	if err != nil {
		return out, err
	}
	for _, ok := range out.Successful {
		for _, e := range in.Entries {
			if aws.ToString(e.Id) == aws.ToString(ok.Id) {
				v.set[aws.ToString(e.ReceiptHandle)] = e.VisibilityTimeout
			}
		}
	}
	return out, err
}

// callCount returns how many calls the Client made.
func (v *visibilities) callCount() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.calls
}

// of returns the visibility set for a receipt handle, and whether one was.
func (v *visibilities) of(handle string) (int32, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	s, ok := v.set[handle]
	return s, ok
}
