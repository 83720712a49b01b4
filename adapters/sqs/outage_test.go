package sqsonce_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sqsonce "github.com/jobonce/jobonce/adapters/sqs"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// oneBatchClient hands out one batch of messages, then long-polls empty.
type oneBatchClient struct {
	mu     sync.Mutex
	msgs   []types.Message
	hidden map[string]int32 // receipt handle → visibility set
}

func (c *oneBatchClient) ReceiveMessage(ctx context.Context, _ *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	c.mu.Lock()
	msgs := c.msgs
	c.msgs = nil
	c.mu.Unlock()
	if len(msgs) == 0 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &sqs.ReceiveMessageOutput{Messages: msgs}, nil
}

func (c *oneBatchClient) DeleteMessage(context.Context, *sqs.DeleteMessageInput, ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	return &sqs.DeleteMessageOutput{}, nil
}

func (c *oneBatchClient) DeleteMessageBatch(_ context.Context, in *sqs.DeleteMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	return &sqs.DeleteMessageBatchOutput{}, nil
}

func (c *oneBatchClient) ChangeMessageVisibility(context.Context, *sqs.ChangeMessageVisibilityInput, ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	return &sqs.ChangeMessageVisibilityOutput{}, nil
}

func (c *oneBatchClient) ChangeMessageVisibilityBatch(_ context.Context, in *sqs.ChangeMessageVisibilityBatchInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range in.Entries {
		c.hidden[aws.ToString(e.ReceiptHandle)] = e.VisibilityTimeout
	}
	return &sqs.ChangeMessageVisibilityBatchOutput{}, nil
}

// A claim that the store does not answer within StoreTimeout is an outage
// (Unavailable, logged at Warn, hidden for UnavailableDelay, run unguarded
// with FailOpen), not a cancellation by the caller: Run's context was never
// cancelled (invariants 4 and 6).
func TestPollerHungStoreIsAnOutage(t *testing.T) {
	for _, failOpen := range []bool{false, true} {
		var mu sync.Mutex
		var seen []core.Outcome
		g, err := core.New(testenv.NewHangingStore(memstore.New()), &core.Config{StoreTimeout: 100 * time.Millisecond, FailOpen: failOpen,
			Observer: func(_ context.Context, e core.Event) { mu.Lock(); seen = append(seen, e.Outcome); mu.Unlock() }})
		require.NoError(t, err)
		client := &oneBatchClient{hidden: map[string]int32{}, msgs: []types.Message{
			{MessageId: aws.String("m1"), ReceiptHandle: aws.String("r1"), Body: aws.String("a")},
			{MessageId: aws.String("m2"), ReceiptHandle: aws.String("r2"), Body: aws.String("b")},
		}}
		var ranMu sync.Mutex
		ran := 0
		p := newPoller(t, g, client, "http://127.0.0.1:1/000000000000/q",
			func(context.Context, types.Message) error { ranMu.Lock(); ran++; ranMu.Unlock(); return nil },
			&sqsonce.PollerConfig{WaitTime: time.Second})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		time.Sleep(500 * time.Millisecond)
		cancel()
		require.NoError(t, <-done)
		mu.Lock()
		client.mu.Lock()
		t.Logf("FailOpen=%v: outcomes %v, visibility set %v, handler runs %d", failOpen, seen, client.hidden, ran)
		want := core.Unavailable
		if failOpen {
			want = core.Unguarded
		}
		assert.Equal(t, []core.Outcome{want, want}, seen, "Run's context was live: the store's silence is an outage")
		client.mu.Unlock()
		mu.Unlock()
	}
}
