package sqsonce_test

import (
	"context"
	"fmt"
	"path"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/redis/go-redis/v9"

	sqsonce "github.com/jobonce/jobonce/adapters/sqs"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// countingStore counts a BatchStore's round trips: one per call.
type countingStore struct {
	driver.BatchStore
	calls atomic.Int64
}

func (s *countingStore) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimReply, error) {
	s.calls.Add(1)
	return s.BatchStore.Claim(ctx, req)
}

func (s *countingStore) Extend(ctx context.Context, key string, token driver.Token, lease time.Duration) error {
	s.calls.Add(1)
	return s.BatchStore.Extend(ctx, key, token, lease)
}

func (s *countingStore) Complete(ctx context.Context, req driver.CompleteRequest) error {
	s.calls.Add(1)
	return s.BatchStore.Complete(ctx, req)
}

func (s *countingStore) Release(ctx context.Context, key string, token driver.Token) error {
	s.calls.Add(1)
	return s.BatchStore.Release(ctx, key, token)
}

func (s *countingStore) Batch(ctx context.Context, completes []driver.CompleteRequest, claims []driver.ClaimRequest) ([]driver.ClaimReply, []error, []error) {
	s.calls.Add(1)
	return s.BatchStore.Batch(ctx, completes, claims)
}

// deleteWatch passes calls through to the client and closes done once n
// messages were deleted.
type deleteWatch struct {
	sqsonce.Client
	left atomic.Int64
	done chan struct{}
}

func (w *deleteWatch) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	out, err := w.Client.DeleteMessageBatch(ctx, in, opts...)
	if err == nil && w.left.Add(-int64(len(out.Successful))) == 0 {
		close(w.done)
	}
	return out, err
}

// fill sends n distinct messages to a fresh queue, outside the timer.
func fill(b *testing.B, c *sqs.Client, n int) string {
	b.Helper()
	q := createQueue(b, c, queueSpec{visibility: 30})
	bodies := make([]string, n)
	run := testenv.RandomID(4)
	for i := range bodies {
		bodies[i] = "noop-" + run + "-" + strconv.Itoa(i)
	}
	sendAll(b, c, q.url, bodies)
	return q.url
}

// BenchmarkPoller consumes no-op messages with a plain receive–handle–delete
// loop and with the Poller on a Redis store, side by side; run it with a
// fixed count, e.g. -benchtime=3000x. It reports messages per second and,
// for the Poller, store round trips per message and the crash window:
// marker-p50-µs and marker-p99-µs, how long after the handler returned its
// message's done marker was written (see testenv.MarkerDelays).
func BenchmarkPoller(b *testing.B) {
	c := newSQS(b)
	prefix := testenv.Prefix(b)
	rdb := testenv.Redis(b, prefix)
	noop := func(context.Context, types.Message) error { return nil }

	b.Run("plain", func(b *testing.B) {
		b.ReportAllocs()
		url := fill(b, c, b.N)
		b.ResetTimer()
		plainLoop(b, c, url, b.N, noop)
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	})

	for _, v := range []struct {
		name                   string
		concurrency, receivers int
	}{
		{"poller", 0, 0},       // the defaults: 20 handlers, one receiver
		{"poller-40x2", 40, 2}, // 40 handlers, two receivers
	} {
		b.Run(v.name, func(b *testing.B) {
			benchPoller(b, c, rdb, prefix, v.concurrency, v.receivers)
		})
	}
}

func benchPoller(b *testing.B, c *sqs.Client, rdb *redis.Client, prefix string, concurrency, receivers int) {
	noop := func(context.Context, types.Message) error { return nil }
	b.ReportAllocs()
	url := fill(b, c, b.N)
	rs, err := redisstore.New(rdb, nil)
	if err != nil {
		b.Fatal(err)
	}
	store := &countingStore{BatchStore: rs}
	delays := new(testenv.MarkerDelays)
	g, err := core.New(store, &core.Config{KeyPrefix: prefix + fmt.Sprint(b.N) + ":", Observer: delays.Observe})
	if err != nil {
		b.Fatal(err)
	}
	watch := &deleteWatch{Client: c, done: make(chan struct{})}
	watch.left.Store(int64(b.N))
	h := testenv.RecordReturns(delays, defaultKey(url), noop)
	p := newPoller(b, g, watch, url, h, &sqsonce.PollerConfig{Concurrency: concurrency, Receivers: receivers, WaitTime: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	b.ResetTimer()
	go func() { done <- p.Run(ctx) }()
	<-watch.done
	b.StopTimer()
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	s := p.Stats()
	if s.Ran != int64(b.N) || s.Deleted != int64(b.N) {
		b.Fatalf("ran %d, deleted %d of %d", s.Ran, s.Deleted, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(store.calls.Load())/float64(b.N), "store-rt/msg")
	delays.Report(b, "")
}

// defaultKey returns the Poller's default key function on the standard
// queue at url: the queue's name, ":" and the fingerprint of the body.
func defaultKey(url string) func(types.Message) string {
	queue := path.Base(url)
	return func(m types.Message) string {
		return queue + ":" + core.Fingerprint([]byte(aws.ToString(m.Body)))
	}
}

// BenchmarkPollerInterleaved runs, on the same server in alternating chunks
// of b.N/10 messages, so that all see the same load on a shared machine:
// the plain loop; the Poller with its defaults (20 handlers, one receiver)
// on Redis; the Poller with 40 handlers and two receivers on Redis; and the
// Poller with its defaults on an in-memory store, which shows the Poller's
// own cost apart from the store's. It reports each rate, each ratio to the
// plain loop, the store round trips per message of the Redis Pollers, and
// each Poller's crash window (name-marker-p50-µs and name-marker-p99-µs, see
// BenchmarkPoller). Each Poller has a Guard of its own, for its window; the
// two Redis Pollers' Guards share one store.
// Run it with a fixed count, e.g. -benchtime=10000x.
func BenchmarkPollerInterleaved(b *testing.B) {
	c := newSQS(b)
	prefix := testenv.Prefix(b)
	rdb := testenv.Redis(b, prefix)
	noop := func(context.Context, types.Message) error { return nil }
	const chunks = 10
	n := max(b.N/chunks, 1)
	rs, err := redisstore.New(rdb, nil)
	if err != nil {
		b.Fatal(err)
	}
	onRedis := &countingStore{BatchStore: rs}
	type variant struct {
		name                   string
		guard                  *core.Guard
		delays                 *testenv.MarkerDelays
		concurrency, receivers int
		queues                 []string
		took                   time.Duration
	}
	poller := func(name string, store driver.Store, prefix string, concurrency, receivers int) variant {
		delays := new(testenv.MarkerDelays)
		g, err := core.New(store, &core.Config{KeyPrefix: prefix, Observer: delays.Observe})
		if err != nil {
			b.Fatal(err)
		}
		return variant{name: name, guard: g, delays: delays, concurrency: concurrency, receivers: receivers}
	}
	variants := []variant{
		{name: "plain"},
		poller("poller", onRedis, prefix, 0, 0),
		poller("poller-40x2", onRedis, prefix, 40, 2),
		poller("poller-memstore", memstore.New(), "", 0, 0),
	}
	for i := range variants {
		for range chunks {
			variants[i].queues = append(variants[i].queues, fill(b, c, n))
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for k := range chunks {
		for i := range variants {
			v := &variants[i]
			start := time.Now()
			if v.guard == nil {
				plainLoop(b, c, v.queues[k], n, noop)
				v.took += time.Since(start)
				continue
			}
			watch := &deleteWatch{Client: c, done: make(chan struct{})}
			watch.left.Store(int64(n))
			h := testenv.RecordReturns(v.delays, defaultKey(v.queues[k]), noop)
			p := newPoller(b, v.guard, watch, v.queues[k], h, &sqsonce.PollerConfig{Concurrency: v.concurrency, Receivers: v.receivers, WaitTime: time.Second})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- p.Run(ctx) }()
			<-watch.done
			v.took += time.Since(start)
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	total := float64(chunks * n)
	for _, v := range variants {
		b.ReportMetric(total/v.took.Seconds(), v.name+"-msgs/s")
		if v.guard != nil {
			b.ReportMetric(variants[0].took.Seconds()/v.took.Seconds(), v.name+"/plain")
			v.delays.Report(b, v.name+"-")
		}
	}
	b.ReportMetric(float64(onRedis.calls.Load())/(2*total), "store-rt/msg")
}

// plainLoop receives, handles and deletes n messages, ten at a time.
func plainLoop(b *testing.B, c *sqs.Client, url string, n int, h sqsonce.HandlerFunc) {
	ctx := context.Background()
	for handled := 0; handled < n; {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		})
		if err != nil {
			b.Fatal(err)
		}
		if len(out.Messages) == 0 {
			continue
		}
		entries := make([]types.DeleteMessageBatchRequestEntry, len(out.Messages))
		for i, m := range out.Messages {
			if err := h(ctx, m); err != nil {
				b.Fatal(err)
			}
			entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle}
		}
		del, err := c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
		if err != nil || len(del.Failed) > 0 {
			b.Fatal(err, del.Failed)
		}
		handled += len(out.Messages)
	}
}
