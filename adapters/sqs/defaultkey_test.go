package sqsonce_test

import (
	"context"
	"strconv"
	"sync"
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

// ranKeys returns the keys of the jobs outs saw run.
func ranKeys(outs *testenv.Outcomes) []string {
	var keys []string
	for _, e := range outs.Events() {
		if e.Outcome == core.Ran {
			keys = append(keys, e.Key)
		}
	}
	return keys
}

// TestDefaultKeyIsTheKeyThePollerAndDecorateClaim: on a standard and on a
// FIFO queue, the key the Poller and Decorate claim for each message (the
// Guard's Event.Key) is DefaultKey of the queue's URL and the message as
// received.
func TestDefaultKeyIsTheKeyThePollerAndDecorateClaim(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	bodies := []string{"refresh cache", `{"order": 42}`, "ship order 7"}
	for _, fifo := range []bool{false, true} {
		t.Run("fifo="+strconv.FormatBool(fifo), func(t *testing.T) {
			t.Parallel()
			// Decorate gets a queue of its own: a receive of the stopped
			// Poller that the server answers late takes a message out of
			// sight.
			q, dq := createQueue(t, c, queueSpec{fifo: fifo}), createQueue(t, c, queueSpec{fifo: fifo})
			send := func(url string, i int, body string) {
				in := &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body)}
				if fifo {
					in.MessageGroupId, in.MessageDeduplicationId = aws.String("g"+strconv.Itoa(i)), aws.String("d"+strconv.Itoa(i))
				}
				_, err := c.SendMessage(context.Background(), in)
				require.NoError(t, err)
			}
			for i, body := range bodies {
				send(q.url, i, body)
			}

			var outs testenv.Outcomes
			g := testenv.MemGuard(t, &core.Config{Observer: outs.Observe})
			var mu sync.Mutex
			var received []types.Message
			p := newPoller(t, g, c, q.url, func(_ context.Context, m types.Message) error {
				mu.Lock()
				defer mu.Unlock()
				received = append(received, m)
				return nil
			}, &sqsonce.PollerConfig{WaitTime: time.Second})
			stop := startPoller(t, p)
			require.Eventually(t, func() bool { return len(ranKeys(&outs)) == len(bodies) }, time.Minute, 20*time.Millisecond)
			require.NoError(t, stop())
			mu.Lock()
			var want []string
			for _, m := range received {
				key, err := sqsonce.DefaultKey(q.url, m)
				require.NoError(t, err)
				want = append(want, key)
			}
			mu.Unlock()
			require.ElementsMatch(t, want, ranKeys(&outs), "the Poller")

			send(dq.url, 0, "decorated")
			var decorated testenv.Outcomes
			h := mustDecorate(t, testenv.MemGuard(t, &core.Config{Observer: decorated.Observe}), c, dq.url,
				func(context.Context, types.Message) error { return nil }, nil)
			m := receiveOne(t, c, dq.url)
			require.NotNil(t, m)
			require.NoError(t, h(context.Background(), *m))
			key, err := sqsonce.DefaultKey(dq.url, *m)
			require.NoError(t, err)
			require.Equal(t, []string{key}, ranKeys(&decorated), "Decorate")
			if fifo {
				require.Equal(t, aws.ToString(m.MessageId), key[len(key)-len(aws.ToString(m.MessageId)):], "a FIFO message is keyed by its MessageId")
			}
		})
	}
}

func TestDefaultKeyOfAFIFOMessageWithoutAMessageIDIsAnError(t *testing.T) {
	t.Parallel()
	_, err := sqsonce.DefaultKey("http://127.0.0.1:4566/000000000000/orders.fifo", types.Message{Body: aws.String("pay 5")})
	require.ErrorContains(t, err, "no MessageId")
	_, err = sqsonce.DefaultKey("http://127.0.0.1:4566/", types.Message{Body: aws.String("pay 5")})
	require.ErrorContains(t, err, "jobonce: sqsonce: DefaultKey: queue URL")
	key, err := sqsonce.DefaultKey("orders", types.Message{Body: aws.String("pay 5")})
	require.NoError(t, err)
	require.Equal(t, "orders:"+core.Fingerprint([]byte("pay 5")), key)
}
