package lambdaonce_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	lambdaonce "github.com/jobonce/jobonce/adapters/lambda"
	sqsonce "github.com/jobonce/jobonce/adapters/sqs"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/stall"
	"github.com/jobonce/jobonce/internal/testenv"
)

// calls counts the handler's calls per body.
type calls struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *calls) add(body string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[body]++
}

func (c *calls) of(body string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[body]
}

func (c *calls) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, k := range c.n {
		n += k
	}
	return n
}

func mustWrap(t testing.TB, g *core.Guard, h lambdaonce.HandlerFunc, cfg *lambdaonce.Config) lambdaonce.Handler {
	t.Helper()
	w, err := lambdaonce.Wrap(g, h, cfg)
	require.NoError(t, err)
	return w
}

// A batch received from a real queue, holding each of five jobs twice: each
// job runs once, its copy is a duplicate, and no record is listed.
func TestBatchRunsEachKeyOnce(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	q := createQueue(t, c, 30, false)
	bodies := []string{"a", "b", "c", "d", "e", "a", "b", "c", "d", "e"}
	sendAll(t, c, q, bodies, nil)
	ev := receiveN(t, c, q, len(bodies))

	var seen calls
	var dups atomic.Int64
	g := testenv.RedisGuard(t, &core.Config{Observer: func(_ context.Context, e core.Event) {
		if e.Outcome == core.Duplicate {
			dups.Add(1)
		}
	}})
	h := mustWrap(t, g, func(_ context.Context, m events.SQSMessage) error {
		seen.add(m.Body)
		return nil
	}, nil)
	resp, err := h(context.Background(), ev)
	require.NoError(t, err)
	require.Empty(t, resp.BatchItemFailures)
	for _, b := range bodies[:5] {
		require.Equal(t, 1, seen.of(b), "calls of %s", b)
	}
	require.EqualValues(t, 5, dups.Load(), "duplicates")

	// The same records once more (a redelivery): all duplicates.
	resp, err = h(context.Background(), ev)
	require.NoError(t, err)
	require.Empty(t, resp.BatchItemFailures)
	require.Equal(t, 5, seen.total())
}

// A failed handler and a job running elsewhere are listed; the running
// copy is hidden for the claim's RetryAfter hint, through the record's
// receipt handle, and the failed record's visibility is left as it is.
func TestFailedAndRunningRecordsAreListed(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	q := createQueue(t, c, 30, false)
	sendAll(t, c, q, []string{"ok", "bad", "busy"}, nil)
	ev := receiveN(t, c, q, 3)

	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	g := testenv.RedisGuardOn(t, rdb, prefix, &core.Config{Lease: 30 * time.Second, MinRetryAfter: 3 * time.Second})
	// Another consumer runs "busy" meanwhile, under the same key.
	var busy events.SQSMessage
	for _, r := range ev.Records {
		if r.Body == "busy" {
			busy = r
		}
	}
	other := testenv.RedisGuardOn(t, rdb, prefix, &core.Config{Lease: 30 * time.Second})
	hold, held := make(chan struct{}), make(chan struct{})
	otherDone := make(chan error, 1)
	go func() {
		h := mustWrap(t, other, func(ctx context.Context, m events.SQSMessage) error {
			close(held)
			<-hold
			return nil
		}, nil)
		_, err := h(context.Background(), events.SQSEvent{Records: []events.SQSMessage{busy}})
		otherDone <- err
	}()
	<-held

	vis := recordVisibility(c)
	var seen calls
	h := mustWrap(t, g, func(_ context.Context, m events.SQSMessage) error {
		seen.add(m.Body)
		if m.Body == "bad" {
			return errors.New("boom")
		}
		return nil
	}, &lambdaonce.Config{Client: vis, QueueURL: q.urlOf, SQS: sqsConfigNoWait()})
	resp, err := h(context.Background(), ev)
	require.NoError(t, err)
	require.Equal(t, idsOf(ev, "bad", "busy"), failed(resp))
	require.Equal(t, 1, seen.of("ok"))
	require.Equal(t, 1, seen.of("bad"))
	require.Zero(t, seen.of("busy"), "a job running elsewhere must not run")

	s, ok := vis.of(busy.ReceiptHandle)
	require.True(t, ok, "the running copy's visibility was not changed")
	require.GreaterOrEqual(t, s, int32(3), "hidden for at least the RetryAfter hint")
	require.Less(t, s, int32(30), "hidden for less than the queue's visibility timeout")
	for _, r := range ev.Records {
		if r.Body == "bad" {
			_, ok := vis.of(r.ReceiptHandle)
			require.False(t, ok, "a failed record's visibility is left to the queue")
		}
	}
	close(hold)
	require.NoError(t, <-otherDone)
}

// An outage of the store: nothing runs, every record is listed, and the
// handler returns an error for the whole batch.
func TestStoreOutageFailsTheWholeBatch(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	q := createQueue(t, c, 30, false)
	sendAll(t, c, q, []string{"x", "y", "z"}, nil)
	ev := receiveN(t, c, q, 3)

	rdb := redis.NewClient(&redis.Options{Addr: testenv.ClosedAddr(t), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := redisstore.New(rdb, nil)
	require.NoError(t, err)
	g := testenv.NewGuard(t, store, &core.Config{StoreTimeout: time.Second})
	vis := recordVisibility(c)
	var seen calls
	h := mustWrap(t, g, func(_ context.Context, m events.SQSMessage) error {
		seen.add(m.Body)
		return nil
	}, &lambdaonce.Config{Client: vis, QueueURL: q.urlOf})
	resp, err := h(context.Background(), ev)
	require.ErrorIs(t, err, core.ErrStoreUnavailable)
	require.Equal(t, idsOf(ev, "x", "y", "z"), failed(resp))
	require.Zero(t, seen.total())
	for _, r := range ev.Records {
		s, ok := vis.of(r.ReceiptHandle)
		require.True(t, ok, "record %s not hidden during the outage", r.Body)
		require.GreaterOrEqual(t, s, int32(10), "hidden for UnavailableDelay")
	}
}

// On a FIFO queue, the records of a group after one that failed are listed
// unrun and handed back at once; another group runs in order.
func TestFIFOGroupStopsAtItsFirstFailure(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	q := createQueue(t, c, 30, true)
	// fauxqs returns one message of a group per receive, while an event
	// source mapping may deliver several: each message is sent to a group of
	// its own, and its record presented as one of group "a" or "b".
	bodies := []string{"a1", "b1", "a2", "b2", "a3", "b3"}
	sendAll(t, c, q, bodies, func(b string) string { return b })
	ev := receiveN(t, c, q, len(bodies))
	slices.SortFunc(ev.Records, func(x, y events.SQSMessage) int {
		return strings.Compare(x.Attributes["SequenceNumber"], y.Attributes["SequenceNumber"])
	})
	for i := range ev.Records {
		ev.Records[i].Attributes["MessageGroupId"] = ev.Records[i].Body[:1]
	}

	vis := recordVisibility(c)
	var mu sync.Mutex
	var order []string
	h := mustWrap(t, testenv.RedisGuard(t, nil), func(_ context.Context, m events.SQSMessage) error {
		mu.Lock()
		order = append(order, m.Body)
		mu.Unlock()
		if m.Body == "a2" {
			return errors.New("a2 fails")
		}
		return nil
	}, &lambdaonce.Config{Client: vis, QueueURL: q.urlOf})
	resp, err := h(context.Background(), ev)
	require.NoError(t, err)
	require.Equal(t, idsOf(ev, "a2", "a3"), failed(resp))
	var as, bs []string
	for _, b := range order {
		if b[0] == 'a' {
			as = append(as, b)
		} else {
			bs = append(bs, b)
		}
	}
	require.Equal(t, []string{"a1", "a2"}, as, "group a ran up to its failure, in order")
	require.Equal(t, []string{"b1", "b2", "b3"}, bs, "group b ran in order")
	for _, r := range ev.Records {
		s, ok := vis.of(r.ReceiptHandle)
		switch r.Body {
		case "a3":
			require.True(t, ok, "a3 not handed back")
			require.Zero(t, s)
		default:
			require.False(t, ok, "visibility of %s changed", r.Body)
		}
	}
}

// An event no event source mapping sends runs nothing and says what is
// wrong with it.
func TestBadInput(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	std := createQueue(t, c, 30, false)
	fifo := createQueue(t, c, 30, true)
	sendAll(t, c, std, []string{"s1", "s2"}, nil)
	sendAll(t, c, fifo, []string{"f1"}, func(string) string { return "g" })
	evStd := receiveN(t, c, std, 2)
	evFIFO := receiveN(t, c, fifo, 1)

	var seen calls
	h := mustWrap(t, testenv.MemGuard(t, nil), func(_ context.Context, m events.SQSMessage) error {
		seen.add(m.Body)
		return nil
	}, nil)

	_, err := h(context.Background(), events.SQSEvent{})
	require.ErrorContains(t, err, "the event holds no SQS records")

	noHandle := slices.Clone(evStd.Records)
	noHandle[1].ReceiptHandle = ""
	_, err = h(context.Background(), events.SQSEvent{Records: noHandle})
	require.ErrorContains(t, err, fmt.Sprintf("record 1 (messageId %q): has no receiptHandle", noHandle[1].MessageId))

	noGroup := slices.Clone(evFIFO.Records)
	noGroup[0].Attributes = map[string]string{"ApproximateReceiveCount": "1"}
	_, err = h(context.Background(), events.SQSEvent{Records: append(noGroup, evStd.Records[0])})
	require.ErrorContains(t, err, "has no MessageGroupId attribute")

	noARN := slices.Clone(evStd.Records)
	noARN[0].EventSourceARN = "arn:aws:sns:us-east-1:000000000000:topic"
	_, err = h(context.Background(), events.SQSEvent{Records: noARN})
	require.ErrorContains(t, err, "is not an SQS queue's ARN")
	require.Zero(t, seen.total(), "no record may run from a bad event")

	_, err = lambdaonce.Wrap(nil, func(context.Context, events.SQSMessage) error { return nil }, nil)
	require.ErrorContains(t, err, "Guard is nil")
	_, err = lambdaonce.Wrap(testenv.MemGuard(t, nil), nil, nil)
	require.ErrorContains(t, err, "handler is nil")
	_, err = lambdaonce.Wrap(testenv.MemGuard(t, nil), func(context.Context, events.SQSMessage) error { return nil }, &lambdaonce.Config{Margin: -time.Second})
	require.ErrorContains(t, err, "Config.Margin")
}

// A job still running near the invocation's deadline ends Config.Margin
// before it: its claim is released and its record listed, before the
// deadline, so a later delivery runs it.
func TestJobsEndBeforeTheInvocationsDeadline(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	q := createQueue(t, c, 30, false)
	sendAll(t, c, q, []string{"long"}, nil)
	ev := receiveN(t, c, q, 1)

	g := testenv.RedisGuard(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	invocation, _ := ctx.Deadline()
	var jobDeadline time.Time
	var jobErr error
	h := mustWrap(t, g, func(ctx context.Context, m events.SQSMessage) error {
		jobDeadline, _ = ctx.Deadline()
		<-ctx.Done()
		jobErr = ctx.Err()
		return jobErr
	}, &lambdaonce.Config{Margin: time.Second})
	resp, err := h(ctx, ev)
	require.NoError(t, err)
	require.Equal(t, invocation.Add(-time.Second), jobDeadline, "the job's deadline")
	require.ErrorIs(t, jobErr, context.DeadlineExceeded)
	require.Equal(t, idsOf(ev, "long"), failed(resp))

	// The claim was released: the next delivery runs at once.
	var ran atomic.Bool
	h2 := mustWrap(t, g, func(context.Context, events.SQSMessage) error { ran.Store(true); return nil }, nil)
	resp, err = h2(context.Background(), ev)
	require.NoError(t, err)
	require.Empty(t, resp.BatchItemFailures)
	require.True(t, ran.Load())
}

// The heartbeat keeps the claim of a job that runs longer than the lease:
// a copy delivered meanwhile finds it running.
func TestHeartbeatKeepsLongJobs(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	q := createQueue(t, c, 30, false)
	sendAll(t, c, q, []string{"slow", "slow"}, nil)
	ev := receiveN(t, c, q, 2)

	lease := time.Second
	g := testenv.RedisGuard(t, &core.Config{Lease: lease})
	probe := make(chan []string, 1)
	var twice atomic.Bool
	h := mustWrap(t, g, func(ctx context.Context, m events.SQSMessage) error {
		time.Sleep(5 * lease / 2) // the job's work, past its lease
		// A copy delivered now, to another invocation, finds the job running.
		h2 := mustWrap(t, g, func(context.Context, events.SQSMessage) error { twice.Store(true); return nil }, &lambdaonce.Config{SQS: sqsConfigNoWait()})
		resp, err := h2(context.Background(), events.SQSEvent{Records: ev.Records[1:]})
		if err != nil {
			return err
		}
		probe <- failed(resp)
		return nil
	}, nil)
	resp, err := h(context.Background(), events.SQSEvent{Records: ev.Records[:1]})
	require.NoError(t, err)
	require.Empty(t, resp.BatchItemFailures)
	require.Equal(t, []string{ev.Records[1].MessageId}, <-probe, "the copy must find the job running")
	require.False(t, twice.Load(), "the copy ran while the job ran")
}

// A message run by the Poller is a duplicate for the Lambda handler, and
// the other way round: both take one key for one message.
func TestPollerAndLambdaShareRecords(t *testing.T) {
	t.Parallel()
	for _, fifo := range []bool{false, true} {
		t.Run(map[bool]string{false: "standard", true: "fifo"}[fifo], func(t *testing.T) {
			t.Parallel()
			sharedRecords(t, fifo)
		})
	}
}

func sharedRecords(t *testing.T, fifo bool) {
	c := newSQS(t)
	q := createQueue(t, c, 2, fifo)
	group := func(string) string { return "g" }
	var dups, ran atomic.Int64
	g := testenv.RedisGuard(t, &core.Config{Observer: func(_ context.Context, e core.Event) {
		switch e.Outcome {
		case core.Duplicate:
			dups.Add(1)
		case core.Ran:
			ran.Add(1)
		}
	}})
	var seen calls
	h := mustWrap(t, g, func(_ context.Context, m events.SQSMessage) error {
		seen.add("lambda:" + m.Body)
		return nil
	}, nil)
	poll := func(client sqsonce.Client, until func() bool) {
		p, err := sqsonce.NewPoller(g, client, q.url, func(_ context.Context, m types.Message) error {
			seen.add("poller:" + aws.ToString(m.Body))
			return nil
		}, &sqsonce.PollerConfig{WaitTime: time.Second, VisibilityTimeout: 2 * time.Second})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		require.Eventually(t, until, 30*time.Second, 20*time.Millisecond)
		cancel()
		require.NoError(t, <-done)
	}

	// The Poller runs a message whose delete is lost; its redelivery to the
	// Lambda handler is a duplicate.
	sendAll(t, c, q, []string{"p1"}, group)
	poll(lostDeletes{c}, func() bool { return ran.Load() == 1 })
	require.Equal(t, 1, seen.of("poller:p1"))
	ev := receiveN(t, c, q, 1)
	require.Equal(t, "p1", ev.Records[0].Body)
	require.Equal(t, "2", ev.Records[0].Attributes["ApproximateReceiveCount"], "not a redelivery")
	resp, err := h(context.Background(), ev)
	require.NoError(t, err)
	require.Empty(t, resp.BatchItemFailures)
	require.Zero(t, seen.of("lambda:p1"), "the Lambda handler ran the Poller's message")
	require.EqualValues(t, 1, dups.Load())
	deleteAll(t, c, q, ev)

	// The Lambda handler runs a message that the event source mapping does
	// not delete; its redelivery to the Poller is a duplicate.
	sendAll(t, c, q, []string{"l1"}, group)
	ev = receiveN(t, c, q, 1)
	resp, err = h(context.Background(), ev)
	require.NoError(t, err)
	require.Empty(t, resp.BatchItemFailures)
	require.Equal(t, 1, seen.of("lambda:l1"))
	poll(c, func() bool { return dups.Load() == 2 && drained(t, c, q.url) })
	require.Zero(t, seen.of("poller:l1"), "the Poller ran the Lambda handler's message")
}

// lostDeletes is an SQS client whose deletes are answered but never made,
// as when a consumer's delete is lost.
type lostDeletes struct{ *sqs.Client }

func (lostDeletes) DeleteMessage(context.Context, *sqs.DeleteMessageInput, ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	return &sqs.DeleteMessageOutput{}, nil
}

func (lostDeletes) DeleteMessageBatch(_ context.Context, in *sqs.DeleteMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	out := &sqs.DeleteMessageBatchOutput{}
	for _, e := range in.Entries {
		out.Successful = append(out.Successful, types.DeleteMessageBatchResultEntry{Id: e.Id})
	}
	return out, nil
}

// deleteAll deletes the event's records.
func deleteAll(t testing.TB, c *sqs.Client, q testQueue, ev events.SQSEvent) {
	t.Helper()
	for _, r := range ev.Records {
		_, err := c.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(q.url), ReceiptHandle: aws.String(r.ReceiptHandle)})
		require.NoError(t, err)
	}
}

// sqsConfigNoWait is a Config under which a copy of a running job does not
// wait for it.
func sqsConfigNoWait() sqsonce.Config { return sqsonce.Config{WaitRunning: -1} }

// Without a Client, a running copy is listed and left to the queue's
// visibility timeout, with one warning naming the setting.
func TestRunningCopyWithoutClient(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	q := createQueue(t, c, 30, false)
	sendAll(t, c, q, []string{"busy"}, nil)
	ev := receiveN(t, c, q, 1)

	g := testenv.RedisGuard(t, nil)
	hold, held := make(chan struct{}), make(chan struct{})
	otherDone := make(chan error, 1)
	go func() {
		h := mustWrap(t, g, func(context.Context, events.SQSMessage) error { close(held); <-hold; return nil }, nil)
		_, err := h(context.Background(), ev)
		otherDone <- err
	}()
	<-held
	var logs syncBuffer
	h := mustWrap(t, g, func(context.Context, events.SQSMessage) error { return errors.New("ran twice") },
		&lambdaonce.Config{SQS: sqsonce.Config{WaitRunning: -1, Logger: slog.New(slog.NewTextHandler(&logs, nil))}})
	for range 2 {
		resp, err := h(context.Background(), ev)
		require.NoError(t, err)
		require.Equal(t, idsOf(ev, "busy"), failed(resp))
	}
	require.Equal(t, 1, strings.Count(logs.String(), "Config.Client is nil"), "%s", logs.String())
	close(hold)
	require.NoError(t, <-otherDone)
}

// A handler's error is logged at WARN with its record, once: in a Lambda
// nothing else shows it.
func TestHandlerErrorIsLogged(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	q := createQueue(t, c, 30, false)
	sendAll(t, c, q, []string{"fails", "works"}, nil)
	ev := receiveN(t, c, q, 2)
	var logs syncBuffer
	h := mustWrap(t, testenv.MemGuard(t, nil), func(_ context.Context, m events.SQSMessage) error {
		if m.Body == "fails" {
			return errors.New("the handler's own error")
		}
		return nil
	}, &lambdaonce.Config{SQS: sqsonce.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}})
	resp, err := h(context.Background(), ev)
	require.NoError(t, err)
	require.Equal(t, idsOf(ev, "fails"), failed(resp))
	require.Equal(t, 1, strings.Count(logs.String(), "level=WARN msg=\"jobonce: lambdaonce: handler failed"), "%s", logs.String())
	require.Contains(t, logs.String(), `error="the handler's own error"`)
	require.Contains(t, logs.String(), "message_id="+idsOf(ev, "fails")[0])
}

// stuckVisibility is an SQS client whose visibility calls do not return:
// until their context ends, or, ignoring it, until release is closed.
type stuckVisibility struct {
	lambdaonce.Client
	ignoreCtx bool
	release   chan struct{}
}

func (s *stuckVisibility) ChangeMessageVisibilityBatch(ctx context.Context, _ *sqs.ChangeMessageVisibilityBatchInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	if s.ignoreCtx {
		<-s.release
		return nil, errors.New("released")
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// Visibility calls that hang, or ignore their context, hold the response no
// later than half of Config.Margin before the invocation's deadline: Lambda
// would stop the function at the deadline and lose the response. The
// running record is listed.
func TestStuckVisibilityCallsEndBeforeTheDeadline(t *testing.T) {
	t.Parallel()
	for _, ignoreCtx := range []bool{false, true} {
		t.Run(fmt.Sprint("ignoreCtx=", ignoreCtx), func(t *testing.T) {
			t.Parallel()
			c := newSQS(t)
			q := createQueue(t, c, 30, false)
			sendAll(t, c, q, []string{"busy", "free"}, nil)
			ev := receiveN(t, c, q, 2)
			g := testenv.MemGuard(t, nil)
			held := g.Claim(context.Background(), core.Job{Key: idsOf(ev, "busy")[0]})
			require.True(t, held[0].Runs())
			stuck := &stuckVisibility{Client: c, ignoreCtx: ignoreCtx, release: make(chan struct{})}
			defer close(stuck.release)
			var logs syncBuffer
			h := mustWrap(t, g, func(context.Context, events.SQSMessage) error { return nil }, &lambdaonce.Config{Client: stuck,
				SQS: sqsonce.Config{WaitRunning: -1, Key: func(m types.Message) string { return aws.ToString(m.MessageId) },
					Logger: slog.New(slog.NewTextHandler(&logs, nil))}})
			probe := stall.Bound(t)
			start := time.Now()
			const untilDeadline = 4 * time.Second // Margin 2s: the calls end 1 s before it
			ctx, cancel := context.WithTimeout(context.Background(), untilDeadline)
			defer cancel()
			resp, err := h(ctx, ev)
			probe.RequireWithin(t, start, untilDeadline, "the response")
			require.NoError(t, err)
			require.Equal(t, idsOf(ev, "busy"), failed(resp))
			require.Contains(t, logs.String(), "visibility change")
		})
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Config.SQS.KeyAttribute keys a record by its message attribute, as the
// Poller does: two messages of a FIFO queue carrying one key run once,
// where their MessageIds would have run both.
func TestKeyAttribute(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	q := createQueue(t, c, 30, true)
	for i := range 2 {
		_, err := c.SendMessage(context.Background(), &sqs.SendMessageInput{
			QueueUrl: aws.String(q.url), MessageBody: aws.String("hello"),
			MessageGroupId: aws.String(fmt.Sprintf("g%d", i)), MessageDeduplicationId: aws.String(fmt.Sprintf("d%d", i)),
			MessageAttributes: map[string]types.MessageAttributeValue{"job": {DataType: aws.String("String"), StringValue: aws.String("k-1")}},
		})
		require.NoError(t, err)
	}
	ev := receiveN(t, c, q, 2)
	var seen calls
	run := func(h lambdaonce.Handler) {
		resp, err := h(context.Background(), ev)
		require.NoError(t, err)
		require.Empty(t, resp.BatchItemFailures)
	}
	run(mustWrap(t, testenv.MemGuard(t, nil), func(_ context.Context, m events.SQSMessage) error {
		seen.add("attribute")
		return nil
	}, &lambdaonce.Config{SQS: sqsonce.Config{KeyAttribute: "job"}}))
	run(mustWrap(t, testenv.MemGuard(t, nil), func(_ context.Context, m events.SQSMessage) error {
		seen.add("id")
		return nil
	}, nil))
	require.Equal(t, 1, seen.of("attribute"))
	require.Equal(t, 2, seen.of("id"))
}

// Ten records whose jobs run elsewhere are hidden in one
// ChangeMessageVisibilityBatch call, twelve in two; an entry that fails
// there (a receipt handle gone stale) is logged, and its record is still
// listed, while the others are hidden.
func TestRunningRecordsAreHiddenTenToACall(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	q := createQueue(t, c, 30, false)
	bodies := make([]string, 12)
	for i := range bodies {
		bodies[i] = fmt.Sprintf("busy-%02d", i)
	}
	sendAll(t, c, q, bodies, nil)
	ev := receiveN(t, c, q, len(bodies))

	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	// Another consumer runs the jobs meanwhile, under the same keys.
	other := testenv.RedisGuardOn(t, rdb, prefix, &core.Config{Lease: 30 * time.Second})
	hold := make(chan struct{})
	var started sync.WaitGroup
	started.Add(len(bodies))
	otherDone := make(chan error, 1)
	go func() {
		h := mustWrap(t, other, func(ctx context.Context, m events.SQSMessage) error {
			started.Done()
			<-hold
			return nil
		}, &lambdaonce.Config{Concurrency: len(bodies)})
		_, err := h(context.Background(), ev)
		otherDone <- err
	}()
	started.Wait()

	// The first record's message is deleted: its receipt handle is stale.
	stale := ev.Records[0]
	_, err := c.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(q.url), ReceiptHandle: aws.String(stale.ReceiptHandle)})
	require.NoError(t, err)

	vis := recordVisibility(c)
	var logs syncBuffer
	g := testenv.RedisGuardOn(t, rdb, prefix, &core.Config{Lease: 30 * time.Second, MinRetryAfter: 3 * time.Second})
	h := mustWrap(t, g, func(context.Context, events.SQSMessage) error {
		return errors.New("a job running elsewhere must not run")
	}, &lambdaonce.Config{Client: vis, QueueURL: q.urlOf, SQS: sqsonce.Config{WaitRunning: -1, Logger: slog.New(slog.NewTextHandler(&logs, nil))}})
	ten := events.SQSEvent{Records: ev.Records[:10]}
	resp, err := h(context.Background(), ten)
	require.NoError(t, err)
	require.Len(t, failed(resp), 10, "every record is listed")
	require.Equal(t, 1, vis.callCount(), "calls for ten records")
	for _, r := range ten.Records[1:] {
		s, ok := vis.of(r.ReceiptHandle)
		require.True(t, ok, "%s not hidden", r.Body)
		require.GreaterOrEqual(t, s, int32(3), "%s hidden for at least the RetryAfter hint", r.Body)
	}
	_, ok := vis.of(stale.ReceiptHandle)
	require.False(t, ok, "a stale receipt handle's change succeeded")
	require.Equal(t, 1, strings.Count(logs.String(), "visibility change failed"), "%s", logs.String())
	require.Contains(t, logs.String(), "message_id="+stale.MessageId)

	resp, err = h(context.Background(), ev)
	require.NoError(t, err)
	require.Len(t, failed(resp), len(bodies), "every record is listed")
	require.Equal(t, 3, vis.callCount(), "calls for twelve records, after the first ten's")
	for _, r := range ev.Records[10:] {
		_, ok := vis.of(r.ReceiptHandle)
		require.True(t, ok, "%s not hidden", r.Body)
	}
	close(hold)
	require.NoError(t, <-otherDone)
}
