package sqsonce_test

import (
	"context"
	"errors"
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

// visibilities passes every call through to the real client and records the
// visibility changes and deletes it makes, by message body.
type visibilities struct {
	*handles
	mu      sync.Mutex
	changes map[string][]int32 // body → visibility timeouts set, in order
	deletes int
}

func newVisibilities(c sqsonce.Client) *visibilities {
	return &visibilities{handles: newHandles(c), changes: map[string][]int32{}}
}

func (v *visibilities) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	v.mu.Lock()
	for _, e := range in.Entries {
		body := v.body(e.ReceiptHandle)
		v.changes[body] = append(v.changes[body], e.VisibilityTimeout)
	}
	v.mu.Unlock()
	return v.Client.ChangeMessageVisibilityBatch(ctx, in, opts...)
}

func (v *visibilities) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	v.mu.Lock()
	body := v.body(in.ReceiptHandle)
	v.changes[body] = append(v.changes[body], in.VisibilityTimeout)
	v.mu.Unlock()
	return v.Client.ChangeMessageVisibility(ctx, in, opts...)
}

func (v *visibilities) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	v.mu.Lock()
	v.deletes += len(in.Entries)
	v.mu.Unlock()
	return v.Client.DeleteMessageBatch(ctx, in, opts...)
}

func (v *visibilities) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	v.mu.Lock()
	v.deletes++
	v.mu.Unlock()
	return v.Client.DeleteMessage(ctx, in, opts...)
}

func (v *visibilities) of(body string) []int32 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]int32(nil), v.changes[body]...)
}

func (v *visibilities) deleted() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.deletes
}

// A store that does not answer a batch's claim within the Guard's
// StoreTimeout is an outage, whatever the Poller's own contexts: nothing
// runs, nothing is deleted, and each message is hidden for
// Config.UnavailableDelay.
func TestPollerHungStoreIsUnavailable(t *testing.T) {
	t.Parallel()
	eachServer(t, testPollerHungStoreIsUnavailable)
}

func testPollerHungStoreIsUnavailable(t *testing.T, s server) {
	c := s.client
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, queueSpec{visibility: 2})
	store := testenv.HangingRedis(t, rdb)
	g := testenv.NewGuard(t, store, &core.Config{KeyPrefix: prefix, StoreTimeout: 300 * time.Millisecond})
	vis := newVisibilities(c)
	var ran atomic.Int32
	p := newPoller(t, g, vis, q.url, func(context.Context, types.Message) error {
		ran.Add(1)
		return nil
	}, &sqsonce.PollerConfig{WaitTime: time.Second, VisibilityTimeout: 2 * time.Second, Config: sqsonce.Config{UnavailableDelay: 5 * time.Second}})
	stop := startPoller(t, p)
	bodies := []string{"hung-1", "hung-2", "hung-3"}
	sendAll(t, c, q.url, bodies)

	require.Eventually(t, func() bool { return p.Stats().Unavailable == 3 }, s.within(10*time.Second), 20*time.Millisecond)
	for _, b := range bodies {
		require.Eventually(t, func() bool { return len(vis.of(b)) > 0 }, s.within(5*time.Second), 20*time.Millisecond, b)
	}
	require.NoError(t, stop())
	st := p.Stats()
	require.EqualValues(t, 3, st.Received, "hidden for UnavailableDelay, not received again")
	require.Zero(t, st.Canceled, "a store timeout is an outage, not a cancellation")
	require.Zero(t, st.Failed+st.Conflicts+st.Ran)
	require.Zero(t, ran.Load(), "the handler ran without a claim")
	require.Zero(t, vis.deleted(), "a message was deleted during the outage")
	for _, b := range bodies {
		require.Equal(t, []int32{5}, vis.of(b), b)
	}
}

// A Poller stopped while a batch's claim hangs: at the shutdown deadline the
// claim gives up with the handlers' context, the message is handed back
// (visibility 0) unrun, and it is counted as Canceled: not as a store
// outage, not as a failure. The next consumer runs it once.
func TestPollerStopDuringHungClaim(t *testing.T) {
	t.Parallel()
	eachServer(t, testPollerStopDuringHungClaim)
}

func testPollerStopDuringHungClaim(t *testing.T, s server) {
	c := s.client
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, queueSpec{visibility: 30, maxReceive: 5})
	eff := newEffects(rdb, prefix)
	store := testenv.HangingRedis(t, rdb)
	g := testenv.NewGuard(t, store, &core.Config{KeyPrefix: prefix, StoreTimeout: time.Minute})
	vis := newVisibilities(c)
	handler := func(ctx context.Context, m types.Message) error { return eff.record(ctx, aws.ToString(m.Body)) }
	// A long poll the stopped Poller abandoned may still take the handed-back
	// message on the server (SQS does the same); a short visibility brings it
	// back soon.
	p := newPoller(t, g, vis, q.url, handler, &sqsonce.PollerConfig{WaitTime: time.Second, VisibilityTimeout: 2 * time.Second, ShutdownTimeout: 500 * time.Millisecond})
	stop := startPoller(t, p)
	sendAll(t, c, q.url, []string{"stopped-while-claiming"})

	select {
	case <-store.Hung:
	case <-time.After(s.within(10 * time.Second)):
		t.Fatal("the claim did not reach the store")
	}
	start := time.Now()
	require.NoError(t, stop())
	require.Less(t, time.Since(start), s.within(5*time.Second), "Run waited for the hung store, not its shutdown deadline")

	st := p.Stats()
	require.EqualValues(t, 1, st.Canceled)
	require.Zero(t, st.Unavailable, "the Poller's own stop is not a store outage")
	require.Zero(t, st.Failed+st.Conflicts+st.Ran+st.GivenUp)
	require.Zero(t, vis.deleted())
	require.Equal(t, []int32{0}, vis.of("stopped-while-claiming"), "handed back at once")
	require.Empty(t, eff.all(t), "the job ran")
	// The store answers again: the next Poller runs the job once.
	store.Hang.Store(false)
	next := newPoller(t, g, c, q.url, handler, &sqsonce.PollerConfig{WaitTime: time.Second})
	startPoller(t, next)
	require.Eventually(t, func() bool { return eff.count() == 1 }, s.within(10*time.Second), 50*time.Millisecond, "the next Poller runs it")
	requireDrained(t, c, q.url, s.within(10*time.Second))
	eff.requireOnce(t, []string{"stopped-while-claiming"})
}

// Decorate whose context ends while the claim hangs returns the context's
// error, runs nothing even with FailOpen, and leaves the message as it is
// (no delete, no visibility change). A store that does not answer within
// StoreTimeout under a live context is an outage: ErrStoreUnavailable, and
// the message hidden for UnavailableDelay.
func TestDecorateHungClaim(t *testing.T) {
	t.Parallel()
	eachServer(t, func(t *testing.T, s server) {
		c := s.client
		prefix := testenv.Prefix(t)
		rdb := testenv.Redis(t, prefix)
		q := createQueue(t, c, queueSpec{visibility: 30})
		store := testenv.HangingRedis(t, rdb)
		vis := newVisibilities(c)
		var ran atomic.Int32
		handler := func(context.Context, types.Message) error {
			ran.Add(1)
			return nil
		}
		cfg := &sqsonce.Config{UnavailableDelay: 7 * time.Second}
		sendAll(t, c, q.url, []string{"caller-stops", "store-hangs"})
		msgs := map[string]types.Message{}
		for len(msgs) < 2 {
			out, err := vis.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
				QueueUrl: aws.String(q.url), MaxNumberOfMessages: 2, WaitTimeSeconds: 1,
				MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
			})
			require.NoError(t, err)
			for _, m := range out.Messages {
				msgs[aws.ToString(m.Body)] = m
			}
		}

		t.Run("context ends", func(t *testing.T) {
			g := testenv.NewGuard(t, store, &core.Config{KeyPrefix: prefix, StoreTimeout: time.Minute, FailOpen: true})
			h := mustDecorate(t, g, vis, q.url, handler, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			err := h(ctx, msgs["caller-stops"])
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.NotErrorIs(t, err, core.ErrStoreUnavailable)
			require.Empty(t, vis.of("caller-stops"), "left as it is")
		})
		t.Run("store times out", func(t *testing.T) {
			g := testenv.NewGuard(t, store, &core.Config{KeyPrefix: prefix, StoreTimeout: 300 * time.Millisecond})
			h := mustDecorate(t, g, vis, q.url, handler, cfg)
			err := h(context.Background(), msgs["store-hangs"])
			require.ErrorIs(t, err, core.ErrStoreUnavailable)
			require.False(t, errors.Is(err, context.Canceled))
			require.Equal(t, []int32{7}, vis.of("store-hangs"))
		})
		require.Zero(t, ran.Load(), "the handler ran")
		require.Zero(t, vis.deleted())
		_, inflight := depth(t, c, q.url)
		require.Equal(t, 2, inflight)
	})
}

// Send whose context ends while the store hangs returns the context's error
// and sends nothing; a store that does not answer within StoreTimeout is
// ErrStoreUnavailable.
func TestSendHungStore(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, queueSpec{})
	store := testenv.HangingRedis(t, rdb)
	in := &sqs.SendMessageInput{QueueUrl: aws.String(q.url), MessageBody: aws.String("invoice 7")}

	g := testenv.NewGuard(t, store, &core.Config{KeyPrefix: prefix, StoreTimeout: time.Minute, FailOpen: true})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	sent, _, err := sqsonce.Send(ctx, g, c, "invoice-7", time.Hour, in)
	require.False(t, sent)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, core.ErrStoreUnavailable)

	g = testenv.NewGuard(t, store, &core.Config{KeyPrefix: prefix, StoreTimeout: 300 * time.Millisecond})
	sent, _, err = sqsonce.Send(context.Background(), g, c, "invoice-7", time.Hour, in)
	require.False(t, sent)
	require.ErrorIs(t, err, core.ErrStoreUnavailable)

	v, f := depth(t, c, q.url)
	require.Zero(t, v+f, "nothing was sent")
}
