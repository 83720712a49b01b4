package sqsonce_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"sync"
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

// decorateAfterItsContextEnds runs h on m with a context that the job itself
// cancels, and returns h's error and how long h took after that.
func decorateAfterItsContextEnds(t *testing.T, h sqsonce.HandlerFunc, m types.Message, ended <-chan struct{}) (error, time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- h(context.Background(), m) }()
	<-ended
	end := time.Now()
	select {
	case err := <-done:
		return err, time.Since(end)
	case <-time.After(sqsonce.SQSTimeout + 5*time.Second):
		t.Fatalf("the decorated handler did not return within %s of its context's end", sqsonce.SQSTimeout+5*time.Second)
		return nil, 0
	}
}

// A delete that SQS never answers holds the decorated handler for at most
// one bounded call after the handler's context ended. The error says the
// delete was not confirmed, and is not taken for the context's end; the
// message comes back and its copy is deleted as a duplicate, unrun.
func TestDecorateBoundsADeleteThatGetsNoAnswer(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, queueSpec{visibility: 1})
	eff := newEffects(rdb, prefix)
	g := testenv.RedisGuardOn(t, rdb, prefix, nil)
	hanging, hung := hangingSQS(t, "DeleteMessage")
	ended := make(chan struct{})
	job := func(ctx context.Context, m types.Message) error {
		return eff.record(ctx, aws.ToString(m.Body))
	}
	h := mustDecorate(t, g, hanging, q.url, func(ctx context.Context, m types.Message) error {
		ctx, cancel := context.WithCancel(ctx)
		defer close(ended)
		defer cancel()
		return job(ctx, m)
	}, nil)
	sendAll(t, c, q.url, []string{"ship order 1"})
	m := receiveOne(t, c, q.url)
	require.NotNil(t, m)

	err, took := decorateAfterItsContextEnds(t, h, *m, ended)
	require.Equal(t, "DeleteMessage", <-hung)
	require.Error(t, err)
	require.ErrorContains(t, err, "delete was not confirmed")
	require.NotErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, context.Canceled)
	require.Less(t, took, sqsonce.SQSTimeout+2*time.Second)
	t.Logf("returned %s after the job's context ended", took.Round(time.Millisecond))

	// The message was not lost: it comes back, and a handler whose delete
	// is answered deletes it as a duplicate.
	again := mustDecorate(t, g, c, q.url, job, nil)
	var back *types.Message
	require.Eventually(t, func() bool { back = receiveOne(t, c, q.url); return back != nil }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, again(context.Background(), *back))
	eff.requireOnce(t, []string{"ship order 1"})
	requireDrained(t, c, q.url, 5*time.Second)
}

// A visibility change that SQS never answers holds the decorated handler for
// at most one bounded call after the handler's context ended; the error
// carries the handler's own and the visibility change's. The message is left
// with its receive's visibility and comes back.
func TestDecorateBoundsAVisibilityChangeThatGetsNoAnswer(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, queueSpec{visibility: 1})
	g := testenv.RedisGuardOn(t, rdb, prefix, nil)
	hanging, hung := hangingSQS(t, "ChangeMessageVisibility")
	ended := make(chan struct{})
	failure := errors.New("the payment service is down")
	h := mustDecorate(t, g, hanging, q.url, func(ctx context.Context, m types.Message) error {
		_, cancel := context.WithCancel(ctx)
		defer close(ended)
		defer cancel()
		return failure
	}, &sqsonce.Config{FailureDelay: 30 * time.Second})
	sendAll(t, c, q.url, []string{"charge order 1"})
	m := receiveOne(t, c, q.url)
	require.NotNil(t, m)

	err, took := decorateAfterItsContextEnds(t, h, *m, ended)
	require.Equal(t, "ChangeMessageVisibility", <-hung)
	require.ErrorIs(t, err, failure)
	require.ErrorContains(t, err, "change visibility")
	require.Less(t, took, sqsonce.SQSTimeout+2*time.Second)
	require.Eventually(t, func() bool { return receiveOne(t, c, q.url) != nil }, 10*time.Second, 10*time.Millisecond,
		"the message did not come back")
}

// runsByID counts a handler's runs per message id.
type runsByID struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *runsByID) record(_ context.Context, m types.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[aws.ToString(m.MessageId)]++
	return nil
}

func (r *runsByID) counts() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.n)
}

// requireEachOnce requires n messages that ran once each.
func (r *runsByID) requireEachOnce(t *testing.T, n int) {
	t.Helper()
	got := r.counts()
	require.Len(t, got, n, "messages that ran: %v", got)
	for id, k := range got {
		require.Equal(t, 1, k, "runs of %s", id)
	}
}

// decorateAll receives the queue's messages with every attribute and runs h
// on each, until the queue is empty.
func decorateAll(t *testing.T, c *sqs.Client, url string, h sqsonce.HandlerFunc) {
	t.Helper()
	require.Eventually(t, func() bool {
		if m := receiveOne(t, c, url); m != nil {
			require.NoError(t, h(context.Background(), *m))
		}
		v, f := depth(t, c, url)
		return v == 0 && f == 0
	}, 20*time.Second, 10*time.Millisecond)
}

// firstDeleteLost loses the answer to the first DeleteMessage, and the
// delete with it: the message comes back when its visibility lapses.
type firstDeleteLost struct {
	sqsonce.Client
	lost atomic.Bool
}

func (f *firstDeleteLost) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	if f.lost.CompareAndSwap(false, true) {
		return nil, errors.New("connection reset before the answer")
	}
	return f.Client.DeleteMessage(ctx, in, opts...)
}

// Two FIFO messages with one body and two deduplication ids are two jobs,
// even received as the SDK receives by default, without any system or
// message attributes: the default key is the MessageId. The first one's
// delete is lost, so it comes back, with its MessageId: that redelivery is a
// duplicate, deleted without running. The only warning is about the missing
// ApproximateReceiveCount.
func TestDecorateRunsAFIFOMessageReceivedWithoutAttributesOnceAndItsRedeliveryIsADuplicate(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, queueSpec{fifo: true, visibility: 1})
	var runs runsByID
	var logs logText
	h := mustDecorate(t, testenv.RedisGuardOn(t, rdb, prefix, nil), &firstDeleteLost{Client: c}, q.url, runs.record, &sqsonce.Config{Logger: logs.Logger()})
	for _, id := range []string{"pay-1", "pay-2"} {
		_, err := c.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(q.url), MessageBody: aws.String("pay 5"),
			MessageGroupId: aws.String("account-1"), MessageDeduplicationId: aws.String(id)})
		require.NoError(t, err)
	}

	var results []error
	var ids []string
	deadline := time.Now().Add(20 * time.Second)
	for len(results) < 3 {
		require.True(t, time.Now().Before(deadline), "the messages were not all received; results %v of %v", results, ids)
		m := receivePlain(t, c, q.url, 0)
		if m == nil {
			continue
		}
		require.Empty(t, m.Attributes)
		require.Empty(t, m.MessageAttributes)
		ids = append(ids, aws.ToString(m.MessageId))
		results = append(results, h(context.Background(), *m))
	}
	require.ErrorContains(t, results[0], "delete was not confirmed")
	require.Equal(t, ids[0], ids[1], "the first message was not redelivered")
	require.NoError(t, results[1], "the redelivery must be deleted as a duplicate")
	require.NoError(t, results[2])
	require.NotEqual(t, ids[0], ids[2])
	runs.requireEachOnce(t, 2)
	requireDrained(t, c, q.url, 5*time.Second)
	warned := logs.lines("level=WARN")
	require.Len(t, warned, 1, "warnings: %v", warned)
	require.Contains(t, warned[0], "without the ApproximateReceiveCount system attribute", "the only warning is about the receive count")
}

// SQS deduplicates a FIFO deduplication id only within five minutes; after
// them the same id is a new message, which runs. On fauxqs, deleting the
// queue and creating it again under its name makes SQS forget the id at
// once: the same body, under content-based deduplication, then gets the
// same MessageDeduplicationId and a new MessageId. A redelivery of one
// message (its visibility lapsed mid-run) finds its job running, and once
// the job is done is a duplicate: each message runs once.
func TestDecorateRunsADeduplicationIDSentAgainOnceSQSForgotItButNotARedelivery(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	spec := queueSpec{fifo: true, visibility: 1, contentDeduplication: true}
	q := createQueue(t, c, spec)
	started, release := make(chan struct{}, 2), make(chan struct{})
	var runs runsByID
	handler := func(ctx context.Context, m types.Message) error {
		started <- struct{}{}
		<-release
		return runs.record(ctx, m)
	}
	h := mustDecorate(t, testenv.RedisGuardOn(t, rdb, prefix, &core.Config{Lease: 3 * time.Second}), c, q.url, handler, nil)
	ctx := context.Background()
	send := func() string {
		out, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q.url), MessageBody: aws.String("refresh cache"),
			MessageGroupId: aws.String("cache")})
		require.NoError(t, err)
		return aws.ToString(out.MessageId)
	}
	first := send()
	require.Equal(t, first, send(), "SQS deduplicated nothing within the interval")

	m := receiveOne(t, c, q.url)
	require.NotNil(t, m)
	require.Equal(t, first, aws.ToString(m.MessageId))
	dedupID := m.Attributes["MessageDeduplicationId"]
	require.NotEmpty(t, dedupID)
	firstDone := make(chan error, 1)
	go func() { firstDone <- h(ctx, *m) }()
	<-started
	var redelivered *types.Message
	require.Eventually(t, func() bool { redelivered = receiveOne(t, c, q.url); return redelivered != nil }, 10*time.Second, 10*time.Millisecond,
		"the message was not redelivered when its visibility lapsed")
	require.Equal(t, first, aws.ToString(redelivered.MessageId))
	require.ErrorIs(t, h(ctx, *redelivered), core.ErrRunning)
	close(release)
	require.NoError(t, <-firstDone)
	// The first receive's delete named a receipt handle the redelivery
	// replaced, so the message may still be there: its next copy is a
	// duplicate.
	require.Eventually(t, func() bool {
		if m := receiveOne(t, c, q.url); m != nil {
			require.Equal(t, first, aws.ToString(m.MessageId))
			require.NoError(t, h(ctx, *m))
		}
		v, f := depth(t, c, q.url)
		return v == 0 && f == 0
	}, 20*time.Second, 10*time.Millisecond)
	runs.requireEachOnce(t, 1)

	name := q.url[strings.LastIndex(q.url, "/")+1:]
	_, err := c.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(q.url)})
	require.NoError(t, err)
	again, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: spec.attributes()})
	require.NoError(t, err)
	require.Equal(t, q.url, aws.ToString(again.QueueUrl))
	second := send()
	require.NotEqual(t, first, second, "SQS still knew the deduplication id")
	m = receiveOne(t, c, q.url)
	require.NotNil(t, m)
	require.Equal(t, second, aws.ToString(m.MessageId))
	require.Equal(t, dedupID, m.Attributes["MessageDeduplicationId"], "not the same deduplication id")
	require.NoError(t, h(ctx, *m))
	runs.requireEachOnce(t, 2)
	requireDrained(t, c, q.url, 5*time.Second)
}

// With Config.KeyAttribute set, a message received without its message
// attributes is left unrun on each receive that does not ask for them, until
// the queue's redrive policy moves it to the dead-letter queue.
func TestDecorateMessageReceivedWithoutItsKeyAttributeReachesTheDeadLetterQueue(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, queueSpec{visibility: 1, maxReceive: 2})
	var runs runsByID
	h := mustDecorate(t, testenv.RedisGuardOn(t, rdb, prefix, nil), c, q.url, runs.record, &sqsonce.Config{KeyAttribute: "job"})
	sendKeyed(t, c, q.url, "job-7", "send invoice 7")

	left := 0
	require.Eventually(t, func() bool {
		if m := receivePlain(t, c, q.url, 0); m != nil {
			require.ErrorIs(t, h(context.Background(), *m), sqsonce.ErrMissingAttribute)
			left++
		}
		v, f := depth(t, c, q.dlq)
		return v+f == 1
	}, 20*time.Second, 10*time.Millisecond, "the message did not reach the dead-letter queue")
	require.Equal(t, 2, left, "receives before the redrive")
	require.Empty(t, runs.counts(), "a handler ran without its key")
	requireDrained(t, c, q.url, 5*time.Second)
}

// With DeduplicationScope=messageGroup, one deduplication id in two groups
// names two messages: with one body (once deleted as a duplicate, unrun) or
// with two (once left for the dead-letter queue as a conflict), each runs.
func TestDecorateRunsOneDeduplicationIDInTwoGroups(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, queueSpec{fifo: true, visibility: 1})
	var runs runsByID
	h := mustDecorate(t, testenv.RedisGuardOn(t, rdb, prefix, nil), c, q.url, runs.record, nil)
	sendToGroups(t, c, q.url, "ship-1", map[string]string{"account-1": "ship order 1", "account-2": "ship order 1"})
	sendToGroups(t, c, q.url, "bill-1", map[string]string{"account-1": "bill account 1", "account-2": "bill account 2"})

	decorateAll(t, c, q.url, func(ctx context.Context, m types.Message) error {
		// What the receive of a queue scoped by group returns (groupScoped).
		m.Attributes["MessageDeduplicationId"], _, _ = strings.Cut(m.Attributes["MessageDeduplicationId"], "~")
		return h(ctx, m)
	})
	runs.requireEachOnce(t, 4)
}

// receivePlain receives one message as the SDK does by default: no system
// attributes and no message attributes. It returns nil when none arrives
// within a second.
func receivePlain(t *testing.T, c *sqs.Client, url string, visibility int32) *types.Message {
	t.Helper()
	out, err := attributesAsAsked{c}.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: 1, WaitTimeSeconds: 1, VisibilityTimeout: visibility,
	})
	require.NoError(t, err)
	if len(out.Messages) == 0 {
		return nil
	}
	m := &out.Messages[0]
	require.NotContains(t, m.Attributes, string(types.MessageSystemAttributeNameApproximateReceiveCount))
	return m
}

// A copy received without ApproximateReceiveCount, while its job runs long
// elsewhere, is still hidden for a delay that grows with every receive
// (Decorate counts the receives it sees): 3 s, then 6 s. With a delay that
// stayed at 3 s, the copy's fourth receive, 9 s after its first, would
// exceed the queue's maxReceiveCount of 3 and move it to the dead-letter
// queue while the job still ran; here the job ends 7.5 s after the copy's
// first receive, and the copy's third receive finds it done and deletes it.
// The missing attribute is warned about once, naming it and the receive
// setting that asks for it.
func TestDecorateGrowsTheDelayOfACopyReceivedWithoutItsReceiveCount(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, queueSpec{visibility: 1, maxReceive: 3})
	eff := newEffects(rdb, prefix)
	var logs logText
	// A 3 s lease bounds the RetryAfter hint at 1 s, below RunningDelay.
	g := testenv.RedisGuardOn(t, rdb, prefix, &core.Config{Lease: 3 * time.Second})
	started, release := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	h := mustDecorate(t, g, c, q.url, func(ctx context.Context, m types.Message) error {
		if runs.Add(1) == 1 {
			close(started)
			<-release
		}
		return eff.record(ctx, aws.ToString(m.Body))
	}, &sqsonce.Config{RunningDelay: 3 * time.Second, Logger: logs.Logger()})

	sendAll(t, c, q.url, []string{"build report 7"})
	first := receivePlain(t, c, q.url, 60)
	require.NotNil(t, first)
	firstDone := make(chan error, 1)
	go func() { firstDone <- h(context.Background(), *first) }()
	<-started
	sendAll(t, c, q.url, []string{"build report 7"})

	var copyResults []error
	var copyReceived time.Time
	released := false
	deadline := time.Now().Add(40 * time.Second)
	for {
		if !released && !copyReceived.IsZero() && time.Since(copyReceived) >= 7500*time.Millisecond {
			close(release)
			released = true
			require.NoError(t, <-firstDone)
		}
		if released {
			if v, f := depth(t, c, q.url); v == 0 && f == 0 {
				break
			}
		}
		require.True(t, time.Now().Before(deadline), "the queue did not drain; the copy's results: %v", copyResults)
		m := receivePlain(t, c, q.url, 0)
		if m == nil {
			continue
		}
		require.NotEqual(t, aws.ToString(first.MessageId), aws.ToString(m.MessageId), "the running message came back")
		if copyReceived.IsZero() {
			copyReceived = time.Now()
		}
		copyResults = append(copyResults, h(context.Background(), *m))
	}

	v, f := depth(t, c, q.dlq)
	require.Zero(t, v+f, "the copy reached the dead-letter queue; its results: %v", copyResults)
	require.Len(t, copyResults, 3, "the copy's results: %v", copyResults)
	require.ErrorIs(t, copyResults[0], core.ErrRunning)
	require.ErrorIs(t, copyResults[1], core.ErrRunning)
	require.NoError(t, copyResults[2], "the copy must be deleted as a duplicate")
	eff.requireOnce(t, []string{"build report 7"})
	warned := logs.lines("without the ApproximateReceiveCount")
	require.Len(t, warned, 1, "warnings: %v", warned)
	require.Contains(t, warned[0], "MessageSystemAttributeNames")
}

// With Config.KeyAttribute set, a receive that did not ask for message
// attributes gets messages that carry none: Decorate leaves them unrun with
// an error matching ErrMissingAttribute that names Config.KeyAttribute and
// MessageAttributeNames, rather than run them under their bodies' hashes,
// which would run job-7 twice. Received with the attribute, the second body
// under job-7 is a conflict. A message that carries other attributes, but
// not the key attribute, runs under its body's hash.
func TestDecorateLeavesAMessageReceivedWithoutItsKeyAttribute(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, queueSpec{visibility: 1})
	var runs runsByID
	var logs logText
	h := mustDecorate(t, testenv.RedisGuardOn(t, rdb, prefix, nil), c, q.url, runs.record,
		&sqsonce.Config{KeyAttribute: "job", Logger: logs.Logger()})
	sendKeyed(t, c, q.url, "job-7", "send invoice 7")
	sendKeyed(t, c, q.url, "job-7", "send invoice 7 again, differently")

	ctx := context.Background()
	for range 2 {
		m := receivePlain(t, c, q.url, 0)
		require.NotNil(t, m)
		require.Empty(t, m.MessageAttributes)
		err := h(ctx, *m)
		require.ErrorIs(t, err, sqsonce.ErrMissingAttribute)
		require.ErrorContains(t, err, "KeyAttribute")
		require.ErrorContains(t, err, `MessageAttributeNames naming "job"`)
	}
	require.Empty(t, runs.counts(), "a handler ran without its key")
	require.Len(t, logs.lines("MessageAttributeNames"), 2, "each message left is warned about")
	v, f := depth(t, c, q.url)
	require.Equal(t, 2, v+f, "a message was deleted")

	var results []error
	require.Eventually(t, func() bool {
		if m := receiveOne(t, c, q.url); m != nil {
			results = append(results, h(ctx, *m))
		}
		return len(results) == 2
	}, 10*time.Second, 10*time.Millisecond)
	require.Len(t, runs.counts(), 1, "messages that ran")
	conflicts := 0
	for _, err := range results {
		if errors.Is(err, core.ErrConflict) {
			conflicts++
		} else {
			require.NoError(t, err)
		}
	}
	require.Equal(t, 1, conflicts, "results: %v", results)

	_, err := c.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: aws.String(q.url), MessageBody: aws.String("send invoice 8"),
		MessageAttributes: map[string]types.MessageAttributeValue{
			"tenant": {DataType: aws.String("String"), StringValue: aws.String("acme")},
		},
	})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		m := receiveOne(t, c, q.url)
		if m == nil || aws.ToString(m.Body) != "send invoice 8" {
			return false
		}
		require.NoError(t, h(ctx, *m))
		return true
	}, 10*time.Second, 10*time.Millisecond)
	require.Len(t, runs.counts(), 2, "the message without the key attribute did not run")
}
