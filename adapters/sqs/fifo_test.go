package sqsonce_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
// default to the deduplication id. fauxqs returns at most one message per
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
	_, err := c.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(q.url), Entries: entries})
	require.NoError(t, err)

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
	g := newGuard(t, rdb, prefix, nil)
	p := &sqsonce.Poller{Client: c, QueueURL: q.url, Guard: g, Handler: handler, WaitTime: time.Second,
		Config: &sqsonce.Config{FailureDelay: time.Second}}
	stop := startPoller(t, p)
	require.Eventually(t, func() bool { return eff.count() == n }, s.within(30*time.Second), 50*time.Millisecond)
	requireDrained(t, c, q.url, s.within(10*time.Second))
	require.NoError(t, stop())
	// The done marker is stored under the deduplication id.
	name := q.url[strings.LastIndex(q.url, "/")+1:]
	stored, err := g.StoredKey(name + ":dedup:step-0")
	require.NoError(t, err)
	n2, err := rdb.Exists(context.Background(), stored).Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, n2, "no done marker under the deduplication id")

	eff.requireOnce(t, ids)
	got, err := rdb.LRange(context.Background(), order, 0, -1).Result()
	require.NoError(t, err)
	require.Equal(t, ids, got, "a group's messages ran out of order")
	require.Zero(t, overlap.Load(), "two messages of one group ran at once")
	require.True(t, failedOnce.Load())
	require.EqualValues(t, 1, p.Stats().Failed)
}
