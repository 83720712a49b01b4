package sqsonce_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	sqsonce "github.com/jobonce/jobonce/adapters/sqs"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/testenv"
)

// receiveOne receives one message with the attributes Decorate reads, or
// nil when none arrives within a second.
func receiveOne(t *testing.T, c *sqs.Client, url string) *types.Message {
	t.Helper()
	out, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: 1, WaitTimeSeconds: 1,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	})
	require.NoError(t, err)
	if len(out.Messages) == 0 {
		return nil
	}
	return &out.Messages[0]
}

func sendKeyed(t *testing.T, c *sqs.Client, url, key, body string) {
	t.Helper()
	_, err := c.SendMessage(context.Background(), &sqs.SendMessageInput{
		QueueUrl: aws.String(url), MessageBody: aws.String(body),
		MessageAttributes: map[string]types.MessageAttributeValue{
			"job": {DataType: aws.String("String"), StringValue: aws.String(key)},
		},
	})
	require.NoError(t, err)
}

// Decorate in a receive loop of one's own: the job runs and its message is
// deleted, a duplicate is deleted without running, and a different body
// under the same key is a conflict left for the dead-letter queue.
func TestDecorateRunDuplicateConflict(t *testing.T) {
	t.Parallel()
	eachServer(t, func(t *testing.T, s server) {
		c := s.client
		prefix := testenv.Prefix(t)
		rdb := testenv.Redis(t, prefix)
		q := createQueue(t, c, queueSpec{visibility: 1, maxReceive: 2})
		eff := newEffects(rdb, prefix)
		g := testenv.RedisGuardOn(t, rdb, prefix, nil)
		h := mustDecorate(t, g, c, q.url, func(ctx context.Context, m types.Message) error {
			return eff.record(ctx, aws.ToString(m.Body))
		}, &sqsonce.Config{KeyAttribute: "job"})

		sendKeyed(t, c, q.url, "order-1", "ship order 1")
		sendKeyed(t, c, q.url, "order-1", "ship order 1")
		sendKeyed(t, c, q.url, "order-1", "ship order 1, but differently")

		ctx := context.Background()
		for range 2 {
			m := receiveOne(t, c, q.url)
			require.NotNil(t, m)
			require.Equal(t, "ship order 1", aws.ToString(m.Body))
			require.NoError(t, h(ctx, *m))
		}
		m := receiveOne(t, c, q.url)
		require.NotNil(t, m)
		require.ErrorIs(t, h(ctx, *m), core.ErrConflict)
		eff.requireOnce(t, []string{"ship order 1"})

		// The conflict is left alone, so the redrive policy moves it.
		require.Eventually(t, func() bool {
			if m := receiveOne(t, c, q.url); m != nil {
				require.ErrorIs(t, h(ctx, *m), core.ErrConflict)
			}
			v, _ := depth(t, c, q.dlq)
			return v == 1
		}, s.within(20*time.Second), 10*time.Millisecond)
		requireDrained(t, c, q.url, s.within(5*time.Second))
	})
}

// A copy that finds its job running is hidden for the RetryAfter hint (4 s:
// a third of the 12 s lease), far longer than the queue's 1 s visibility
// timeout: no receive gets it for 2.5 s. Once the running copy is done, it
// comes back and is deleted as a duplicate.
func TestDecorateRunning(t *testing.T) {
	t.Parallel()
	eachServer(t, func(t *testing.T, s server) {
		c := s.client
		prefix := testenv.Prefix(t)
		rdb := testenv.Redis(t, prefix)
		q := createQueue(t, c, queueSpec{visibility: 1, maxReceive: 5})
		g := testenv.RedisGuardOn(t, rdb, prefix, &core.Config{Lease: 12 * time.Second})
		h := mustDecorate(t, g, c, q.url, func(context.Context, types.Message) error {
			return errors.New("must not run")
		}, &sqsonce.Config{KeyAttribute: "job"})

		release := make(chan struct{})
		holding := make(chan struct{})
		doneDo := make(chan error, 1)
		go func() {
			_, err := g.Do(context.Background(), "report-7", func(context.Context) error {
				close(holding)
				<-release
				return nil
			})
			doneDo <- err
		}()
		<-holding
		sendKeyed(t, c, q.url, "report-7", "build report 7")
		m := receiveOne(t, c, q.url)
		require.NotNil(t, m)
		err := h(context.Background(), *m)
		hidden := time.Now()
		require.ErrorIs(t, err, core.ErrRunning)
		// Receives, not the queue's approximate counts: an implementation may
		// count a lapsed in-flight message as in flight until it is received.
		for time.Since(hidden) < 2500*time.Millisecond {
			require.Nil(t, receiveOne(t, c, q.url), "the running copy came back %s after it was hidden", time.Since(hidden))
		}
		close(release)
		require.NoError(t, <-doneDo)

		var again *types.Message
		require.Eventually(t, func() bool {
			again = receiveOne(t, c, q.url)
			return again != nil
		}, s.within(15*time.Second), 10*time.Millisecond)
		require.GreaterOrEqual(t, time.Since(hidden), 3*time.Second, "the copy came back before the hint")
		require.Equal(t, "2", again.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
		require.NoError(t, h(context.Background(), *again), "the copy must be deleted as a duplicate")
		requireDrained(t, c, q.url, s.within(5*time.Second))
	})
}

// Send sends once per key within the window; a failed send leaves no marker,
// so the next attempt sends.
func TestSend(t *testing.T) {
	t.Parallel()
	eachServer(t, func(t *testing.T, s server) { testSend(t, s.client) })
}

func testSend(t *testing.T, c *sqs.Client) {
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, queueSpec{})
	g := testenv.RedisGuardOn(t, rdb, prefix, nil)
	ctx := context.Background()

	in := &sqs.SendMessageInput{QueueUrl: aws.String(q.url + "-missing"), MessageBody: aws.String("invoice 9")}
	sent, _, err := sqsonce.Send(ctx, g, c, "invoice-9", time.Minute, in)
	require.Error(t, err)
	require.False(t, sent)

	in.QueueUrl = aws.String(q.url)
	sent, out, err := sqsonce.Send(ctx, g, c, "invoice-9", time.Minute, in)
	require.NoError(t, err)
	require.True(t, sent)
	require.NotEmpty(t, aws.ToString(out.MessageId))
	sent, out, err = sqsonce.Send(ctx, g, c, "invoice-9", time.Minute, in)
	require.NoError(t, err)
	require.False(t, sent)
	require.Nil(t, out)

	v, f := depth(t, c, q.url)
	require.Equal(t, 1, v+f)
}

// TestDecorateKeyPolicy: the policy every adapter shares. An empty key is
// invalid: the handler does not run, the error matches core.ErrInvalidKey,
// it is reported as Rejected, and the message is left for the dead-letter
// queue.
func TestDecorateKeyPolicy(t *testing.T) {
	t.Parallel()
	eachServer(t, func(t *testing.T, s server) {
		c := s.client
		q := createQueue(t, c, queueSpec{visibility: 1, maxReceive: 1})
		var outs testenv.Outcomes
		g := testenv.RedisGuard(t, &core.Config{Observer: outs.Observe})
		var runs atomic.Int32
		h := mustDecorate(t, g, c, q.url, func(context.Context, types.Message) error {
			runs.Add(1)
			return nil
		}, &sqsonce.Config{Key: func(m types.Message) string {
			if aws.ToString(m.Body) == "no key" {
				return ""
			}
			return aws.ToString(m.Body)
		}})
		sendAll(t, c, q.url, []string{"no key"})
		m := receiveOne(t, c, q.url)
		require.NotNil(t, m)
		require.ErrorIs(t, h(context.Background(), *m), core.ErrInvalidKey)
		require.Zero(t, runs.Load(), "the handler ran")
		require.EqualValues(t, 1, outs.Get(core.Rejected))
		require.Eventually(t, func() bool {
			receiveOne(t, c, q.url) // moves it once its receives are used up
			v, _ := depth(t, c, q.dlq)
			return v == 1
		}, s.within(20*time.Second), 10*time.Millisecond, "left for the dead-letter queue")
	})
}
