package sqsonce_test

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/jobonce/jobonce/internal/testenv"
)

// On a FIFO queue a message group's messages run one after the other, in
// order; when one fails, the group's later messages wait for its retry. Keys
// default to the queue and the message id. fauxqs returns at most one message per
// group and receive, moto the whole group.
func TestPollerFIFOOrder(t *testing.T) {
	t.Parallel()
	eachServer(t, testPollerFIFOOrder)
}

func testPollerFIFOOrder(t *testing.T, s server) {
	c := s.client
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, queueSpec{fifo: true, visibility: 30, maxReceive: 5})
	eff := newEffects(rdb, prefix)

	const n = 8
	ids := make([]string, n)
	entries := make([]types.SendMessageBatchRequestEntry, n)
	for i := range n {
		ids[i] = fmt.Sprintf("step-%d", i)
		entries[i] = types.SendMessageBatchRequestEntry{
			Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String(ids[i]),
			MessageGroupId: aws.String("account-1"), MessageDeduplicationId: aws.String(ids[i]),
		}
	}
	sent, err := c.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(q.url), Entries: entries})
	require.NoError(t, err)
	require.Len(t, sent.Successful, n)

	order := prefix + "order"
	var failedOnce atomic.Bool
	var running, overlap atomic.Int32
	handler := func(ctx context.Context, m types.Message) error {
		if running.Add(1) > 1 {
			overlap.Store(1)
		}
		defer running.Add(-1)
		time.Sleep(5 * time.Millisecond)
		body := aws.ToString(m.Body)
		if body == "step-3" && failedOnce.CompareAndSwap(false, true) {
			return errors.New("step 3 fails once")
		}
		if err := rdb.RPush(ctx, order, body).Err(); err != nil {
			return err
		}
		return eff.record(ctx, body)
	}
	g := testenv.RedisGuardOn(t, rdb, prefix, nil)
	p := newPoller(t, g, c, q.url, handler, &sqsonce.PollerConfig{WaitTime: time.Second, Config: sqsonce.Config{FailureDelay: time.Second}})
	stop := startPoller(t, p)
	require.Eventually(t, func() bool { return eff.count() == n }, s.within(30*time.Second), 50*time.Millisecond)
	requireDrained(t, c, q.url, s.within(10*time.Second))
	require.NoError(t, stop())
	// The done marker is stored under the queue and the message id.
	name := q.url[strings.LastIndex(q.url, "/")+1:]
	var step0 string
	for _, e := range sent.Successful {
		if aws.ToString(e.Id) == "0" {
			step0 = aws.ToString(e.MessageId)
		}
	}
	stored, err := g.StoredKey(name + ":id:" + step0)
	require.NoError(t, err)
	n2, err := rdb.Exists(context.Background(), stored).Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, n2, "no done marker under the message id")

	eff.requireOnce(t, ids)
	got, err := rdb.LRange(context.Background(), order, 0, -1).Result()
	require.NoError(t, err)
	require.Equal(t, ids, got, "a group's messages ran out of order")
	require.Zero(t, overlap.Load(), "two messages of one group ran at once")
	require.True(t, failedOnce.Load())
	require.EqualValues(t, 1, p.Stats().Failed)
	if s.name == "moto" {
		// The whole group came in one receive; the failed step was retried
		// in place (the Poller read maxReceiveCount from the queue), so no
		// message was received twice.
		require.EqualValues(t, n, p.Stats().Received)
	}
}

// A FIFO group's head fails every time, on a queue whose maxReceiveCount is
// 3; its four followers arrive in the same receive where the server returns
// whole groups (moto). The head is retried in place, its followers kept
// hidden, for the three attempts the queue allows it; then it is given up
// and its followers run, each once, in order. Only the head reaches the
// dead-letter queue, after exactly three attempts. Where the server returns
// one message per group and receive (fauxqs), the queue's own redeliveries
// give the same result.
func TestPollerFIFOFailingHead(t *testing.T) {
	t.Parallel()
	eachServer(t, testPollerFIFOFailingHead)
}

func testPollerFIFOFailingHead(t *testing.T, s server) {
	c := s.client
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, queueSpec{fifo: true, visibility: 4, maxReceive: 3})
	rec := newRecorder(c)

	bodies := []string{"A0", "A1", "A2", "A3", "A4"}
	entries := make([]types.SendMessageBatchRequestEntry, len(bodies))
	for i, b := range bodies {
		entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String(b),
			MessageGroupId: aws.String("A"), MessageDeduplicationId: aws.String(b)}
	}
	_, err := c.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(q.url), Entries: entries})
	require.NoError(t, err)

	var mu sync.Mutex
	var order []string
	var received int // most messages of one receive
	handler := func(ctx context.Context, m types.Message) error {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, aws.ToString(m.Body))
		if aws.ToString(m.Body) == "A0" {
			return errors.New("A0 always fails")
		}
		return nil
	}
	p := newPoller(t, testenv.RedisGuardOn(t, rdb, prefix, nil), receiveSizes(rec, func(n int) {
		mu.Lock()
		received = max(received, n)
		mu.Unlock()
	}), q.url, handler, &sqsonce.PollerConfig{WaitTime: time.Second, VisibilityTimeout: 4 * time.Second, MaxReceiveCount: 3, Config: sqsonce.Config{FailureDelay: time.Second}})
	stop := startPoller(t, p)
	requireDrained(t, c, q.url, s.within(40*time.Second))
	require.NoError(t, stop())
	// The server moves the head as it answers a receive; its count in the
	// dead-letter queue may show a moment later.
	for deadline := time.Now().Add(s.within(10 * time.Second)); ; time.Sleep(50 * time.Millisecond) {
		v, f, err := depthErr(c, q.dlq)
		if err == nil && v+f == 1 {
			break
		}
		if time.Now().After(deadline) {
			mu.Lock()
			sv, sf, serr := depthErr(c, q.url)
			t.Fatalf("the dead-letter queue holds %d visible and %d in-flight messages (%v), want 1; the queue %d and %d (%v); handled %v; stats %+v",
				v, f, err, sv, sf, serr, order, p.Stats())
		}
	}

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"A0", "A0", "A0", "A1", "A2", "A3", "A4"}, order)
	dead := receiveOne(t, c, q.dlq)
	require.NotNil(t, dead)
	require.Equal(t, "A0", aws.ToString(dead.Body))
	st := p.Stats()
	require.EqualValues(t, 3, st.Failed)
	require.EqualValues(t, 4, st.Ran)
	require.EqualValues(t, 4, st.Deleted)
	if received == 1 {
		require.Zero(t, st.GivenUp)
	} else {
		// Given up once, then handed back unrun at its receives 2 and 3.
		require.EqualValues(t, 3, st.GivenUp)
		// The followers came with the head, ran in that receive and were
		// received only then.
		for _, id := range rec.receivedIDs() {
			if body := rec.bodyOf(id); body != "A0" {
				require.Equal(t, 1, rec.receivesOf(id), "receives of %s", body)
			}
		}
	}
	t.Logf("%s: at most %d messages per receive; the head was received %d times", s.name, received, rec.receivesOfBody("A0"))
}

// Stopping Run while a FIFO message waits to be retried in place ends the
// wait at once: the message is left as the failure it is, its followers are
// handed back unrun, and nothing is deleted. (moto only: fauxqs never puts a
// group's followers in the same receive.)
func TestPollerFIFOStopDuringRetry(t *testing.T) {
	t.Parallel()
	s := motoServer(t)
	c := s.client
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, queueSpec{fifo: true, visibility: 30, maxReceive: 5})
	rec := newRecorder(c)

	bodies := []string{"B0", "B1", "B2"}
	entries := make([]types.SendMessageBatchRequestEntry, len(bodies))
	for i, b := range bodies {
		entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String(b),
			MessageGroupId: aws.String("B"), MessageDeduplicationId: aws.String(b)}
	}
	_, err := c.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(q.url), Entries: entries})
	require.NoError(t, err)

	ran := make(chan string, 10)
	p := newPoller(t, testenv.RedisGuardOn(t, rdb, prefix, nil), rec, q.url, func(ctx context.Context, m types.Message) error {
		ran <- aws.ToString(m.Body)
		return errors.New("fails")
	}, &sqsonce.PollerConfig{WaitTime: time.Second, MaxReceiveCount: 5, ShutdownTimeout: 20 * time.Second, Config: sqsonce.Config{FailureDelay: 30 * time.Second}})
	stop := startPoller(t, p)
	select {
	case b := <-ran:
		require.Equal(t, "B0", b)
	case <-time.After(s.within(20 * time.Second)):
		t.Fatal("the head did not run")
	}
	require.Eventually(t, func() bool { return p.Stats().Failed == 1 }, s.within(5*time.Second), 10*time.Millisecond)
	begin := time.Now()
	require.NoError(t, stop())
	require.Less(t, time.Since(begin), s.within(3*time.Second), "Run waited for the retry in place")
	require.Empty(t, ran, "a follower ran, or the head ran again")
	require.Empty(t, rec.deletedHandles())
	v, f := depth(t, c, q.url)
	require.Equal(t, len(bodies), v+f)
	st := p.Stats()
	require.EqualValues(t, 1, st.Failed)
	require.EqualValues(t, len(bodies), st.Received)
	require.Zero(t, st.GivenUp)
	// The followers were handed back at once, the head hidden for its
	// FailureDelay: the group is locked behind the head.
	require.Nil(t, receiveOne(t, c, q.url))
}

// With DeduplicationScope=messageGroup, one deduplication id in two groups
// names two messages: with one body (once deleted as a duplicate, unrun) or
// with two (once left for the dead-letter queue as a conflict), the Poller
// runs each.
func TestPollerRunsOneDeduplicationIDInTwoGroups(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, queueSpec{fifo: true, visibility: 5})
	sendToGroups(t, c, q.url, "ship-1", map[string]string{"account-1": "ship order 1", "account-2": "ship order 1"})
	sendToGroups(t, c, q.url, "bill-1", map[string]string{"account-1": "bill account 1", "account-2": "bill account 2"})

	var runs runsByID
	p := newPoller(t, testenv.RedisGuardOn(t, rdb, prefix, nil), groupScoped{c}, q.url, runs.record, &sqsonce.PollerConfig{WaitTime: time.Second})
	stop := startPoller(t, p)
	requireDrained(t, c, q.url, 20*time.Second)
	require.NoError(t, stop())
	runs.requireEachOnce(t, 4)
	st := p.Stats()
	require.EqualValues(t, 4, st.Ran)
	require.Zero(t, st.Duplicates)
	require.Zero(t, st.Conflicts)
}

// withoutDeduplicationID removes the MessageDeduplicationId and the
// MessageGroupId of every message from what the receive returns.
type withoutDeduplicationID struct{ sqsonce.Client }

func (w withoutDeduplicationID) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := w.Client.ReceiveMessage(ctx, in, opts...)
	if err == nil {
		for _, m := range out.Messages {
			delete(m.Attributes, "MessageDeduplicationId")
			delete(m.Attributes, "MessageGroupId")
		}
	}
	return out, err
}

// A FIFO message received without its deduplication id and group runs under
// its message id: the Poller needs neither.
func TestPollerRunsAFIFOMessageReceivedWithoutItsDeduplicationID(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, queueSpec{fifo: true, visibility: 2})
	for i, group := range []string{"account-1", "account-2"} {
		_, err := c.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(q.url), MessageBody: aws.String("pay 5"),
			MessageGroupId: aws.String(group), MessageDeduplicationId: aws.String(fmt.Sprint("d", i))})
		require.NoError(t, err)
	}
	var runs runsByID
	p := newPoller(t, testenv.RedisGuardOn(t, rdb, prefix, nil), withoutDeduplicationID{c}, q.url, runs.record, &sqsonce.PollerConfig{WaitTime: time.Second})
	stop := startPoller(t, p)
	requireDrained(t, c, q.url, 20*time.Second)
	require.NoError(t, stop())
	runs.requireEachOnce(t, 2)
	st := p.Stats()
	require.EqualValues(t, 2, st.Ran)
	require.Zero(t, st.Failed)
	require.Zero(t, st.Duplicates)
}

// A FIFO head whose last attempt in place failed only because the shutdown
// deadline cancelled it is not given up: it is handed back, and the next Run
// runs it (here it then succeeds, and its follower runs after it). (moto
// only: fauxqs never puts a group's followers in the same receive.)
func TestPollerFIFOShutdownCancelledAttemptIsNotAGiveUp(t *testing.T) {
	t.Parallel()
	s := motoServer(t)
	c := s.client
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, queueSpec{fifo: true, visibility: 30, maxReceive: 2})
	entries := make([]types.SendMessageBatchRequestEntry, 2)
	for i, b := range []string{"H", "F"} {
		entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String(b),
			MessageGroupId: aws.String("G"), MessageDeduplicationId: aws.String(b)}
	}
	_, err := c.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(q.url), Entries: entries})
	require.NoError(t, err)

	var mu sync.Mutex
	var order []string
	second := make(chan struct{})
	handler := func(ctx context.Context, m types.Message) error {
		mu.Lock()
		order = append(order, aws.ToString(m.Body))
		heads := 0
		for _, b := range order {
			if b == "H" {
				heads++
			}
		}
		mu.Unlock()
		if aws.ToString(m.Body) != "H" {
			return nil
		}
		switch heads {
		case 1:
			return errors.New("H fails at first")
		case 2: // the last attempt the queue allows this receive: cut by the shutdown deadline
			close(second)
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}
	g := testenv.RedisGuardOn(t, rdb, prefix, nil)
	p := newPoller(t, g, c, q.url, handler,
		&sqsonce.PollerConfig{WaitTime: time.Second, MaxReceiveCount: 2, ShutdownTimeout: 500 * time.Millisecond, Config: sqsonce.Config{FailureDelay: time.Second}})
	stop := startPoller(t, p)
	select {
	case <-second:
	case <-time.After(s.within(20 * time.Second)):
		t.Fatal("the head's second attempt did not start")
	}
	require.NoError(t, stop())
	require.Zero(t, p.Stats().GivenUp, "an attempt the shutdown cancelled was taken for a give-up")

	stop = startPoller(t, p)
	requireDrained(t, c, q.url, s.within(30*time.Second))
	require.NoError(t, stop())
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"H", "H", "H", "F"}, order)
	v, f := depth(t, c, q.dlq)
	require.Zero(t, v+f, "messages in the dead-letter queue")
	require.Zero(t, p.Stats().GivenUp)
}
