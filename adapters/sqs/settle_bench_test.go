package sqsonce_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	sqsonce "github.com/jobonce/jobonce/adapters/sqs"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/testenv"
)

// BenchmarkSettle measures how soon a duplicate settles on a standard
// queue, with the Poller's defaults (20 handlers, one receiver, batches of
// 10) and with Decorate in a receive loop of the same shape, both on a
// Guard on Redis with its defaults: each iteration is a pair of copies of
// one 200ms job. "together" sends the copies side by side, so they mostly
// come in one receive; "apart" sends pairs in waves of five, the second
// copies once the first ones run, so each comes in a receive of its own and
// finds its job running (a wave of five pairs leaves handler slots free for
// the second copies).
// settle-p50-ms and settle-p99-ms run from the first copy's Ran to the
// second's Duplicate (see testenv.Settles), and msgs/s is beside the same
// number of messages without duplicates ("unique"). Run it with a small
// -benchtime, such as 20x.
func BenchmarkSettle(b *testing.B) {
	c := newSQS(b)
	for _, form := range []string{"poller", "decorate"} {
		for _, variant := range []string{"unique", "together", "apart"} {
			b.Run(form+"/"+variant, func(b *testing.B) { benchSettle(b, c, form, variant) })
		}
	}
}

func benchSettle(b *testing.B, c *sqs.Client, form, variant string) {
	b.StopTimer()
	url := createQueue(b, c, queueSpec{visibility: 30}).url
	var settles testenv.Settles
	var ran atomic.Int64
	allRan := make(chan struct{})
	settles.Also = func(_ context.Context, ev core.Event) {
		if ev.Outcome == core.Ran && ran.Add(1) == int64(2*b.N) {
			close(allRan)
		}
	}
	g := testenv.RedisGuard(b, &core.Config{Observer: settles.Observe})
	const concurrency, wave = 20, 5
	starts := make(chan struct{}, 2*b.N)
	handler := func(ctx context.Context, _ types.Message) error {
		starts <- struct{}{}
		t := time.NewTimer(200 * time.Millisecond) // the job
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var firsts, seconds []string
	for i := range b.N {
		body := "settle-" + strconv.Itoa(i)
		switch variant {
		case "unique":
			firsts = append(firsts, body+"-a", body+"-b")
		case "together":
			firsts = append(firsts, body, body)
		case "apart":
			firsts, seconds = append(firsts, body), append(seconds, body)
		}
	}
	if variant != "apart" {
		sendAll(b, c, url, firsts)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	b.StartTimer()
	start := time.Now()
	switch form {
	case "poller":
		p := newPoller(b, g, c, url, handler, nil)
		wg.Go(func() {
			if err := p.Run(ctx); err != nil {
				b.Error(err)
			}
		})
	case "decorate":
		h := mustDecorate(b, g, c, url, handler, nil)
		wg.Go(func() { decorateLoop(ctx, c, url, h, concurrency) })
	}
	if variant == "apart" {
		for i := 0; i < b.N; i += wave {
			n := min(wave, b.N-i)
			sendAll(b, c, url, firsts[i:i+n])
			for range n {
				select {
				case <-starts:
				case <-time.After(time.Minute):
					b.Fatal("the first copies did not start")
				}
			}
			sendAll(b, c, url, seconds[i:i+n])
			settles.Wait(b, i+n, time.Minute)
		}
	}
	if variant == "unique" {
		select {
		case <-allRan:
		case <-time.After(5 * time.Minute):
			b.Fatal("messages were not handled")
		}
	} else {
		settles.Wait(b, b.N, 5*time.Minute)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	wg.Wait()
	b.ReportMetric(float64(2*b.N)/elapsed.Seconds(), "msgs/s")
	if variant != "unique" {
		settles.Report(b)
	}
}

// decorateLoop receives batches of up to 10 messages until ctx ends and
// hands each to h on a goroutine of its own, at most concurrency at once.
func decorateLoop(ctx context.Context, c *sqs.Client, url string, h sqsonce.HandlerFunc, concurrency int) {
	slots := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for ctx.Err() == nil {
		n := 0
		for n < 10 {
			select {
			case slots <- struct{}{}:
				n++
				continue
			case <-ctx.Done():
				return
			default:
			}
			if n > 0 {
				break
			}
			select { // wait for one slot at least
			case slots <- struct{}{}:
				n++
			case <-ctx.Done():
				return
			}
		}
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: int32(n), WaitTimeSeconds: 1,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		var msgs []types.Message
		if err == nil {
			msgs = out.Messages
		}
		for range n - len(msgs) {
			<-slots
		}
		for _, m := range msgs {
			wg.Go(func() {
				defer func() { <-slots }()
				_ = h(context.WithoutCancel(ctx), m)
			})
		}
	}
}
