// Command sqs shows jobonce on Amazon SQS: a producer sends every job twice,
// as at-least-once delivery may, and a Poller runs each job once.
//
// It talks to the SQS endpoint in SQS_ENDPOINT (for example a local
// fauxqs: node scripts/fauxqs/server.mjs prints its URL), with the region in
// AWS_REGION (default us-east-1) and the keys in AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY (default dummy keys, for a local server). Claims are
// kept in the Redis at REDIS_URL (default redis://127.0.0.1:6379/0).
//
//	SQS_ENDPOINT=http://127.0.0.1:4566 go -C examples run ./sqs
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/redis/go-redis/v9"

	sqsonce "github.com/jobonce/jobonce/adapters/sqs"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/redisstore"
)

const jobs = 20

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	endpoint := os.Getenv("SQS_ENDPOINT")
	if endpoint == "" {
		return errors.New("set SQS_ENDPOINT to the SQS endpoint, e.g. http://127.0.0.1:4566")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	client := sqs.New(sqs.Options{
		BaseEndpoint: aws.String(endpoint),
		Region:       cmp.Or(os.Getenv("AWS_REGION"), "us-east-1"),
		Credentials: aws.NewCredentialsCache(aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{
				AccessKeyID:     cmp.Or(os.Getenv("AWS_ACCESS_KEY_ID"), "test"),
				SecretAccessKey: cmp.Or(os.Getenv("AWS_SECRET_ACCESS_KEY"), "test"),
				SessionToken:    os.Getenv("AWS_SESSION_TOKEN"),
			}, nil
		})),
	})

	opt, err := redis.ParseURL(cmp.Or(os.Getenv("REDIS_URL"), "redis://127.0.0.1:6379/0"))
	if err != nil {
		return fmt.Errorf("REDIS_URL: %w", err)
	}
	opt.ContextTimeoutEnabled = true // calls end with their context, not after ReadTimeout
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	store, err := redisstore.New(rdb, nil)
	if err != nil {
		return err
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	guard, err := core.New(store, &core.Config{KeyPrefix: "jobonce-example:" + run + ":"})
	if err != nil {
		return err
	}

	q, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("jobonce-example-" + run)})
	if err != nil {
		return fmt.Errorf("create queue: %w", err)
	}
	queueURL := aws.ToString(q.QueueUrl)
	defer client.DeleteQueue(context.WithoutCancel(ctx), &sqs.DeleteQueueInput{QueueUrl: q.QueueUrl})

	// Producer: every job twice, with its key in a message attribute.
	for i := range jobs {
		key := fmt.Sprintf("email:welcome:user-%d", i)
		for range 2 {
			_, err := client.SendMessage(ctx, &sqs.SendMessageInput{
				QueueUrl:    q.QueueUrl,
				MessageBody: aws.String(fmt.Sprintf(`{"user":%d}`, i)),
				MessageAttributes: map[string]types.MessageAttributeValue{
					"job": {DataType: aws.String("String"), StringValue: aws.String(key)},
				},
			})
			if err != nil {
				return fmt.Errorf("send: %w", err)
			}
		}
	}
	// The producer side can deduplicate too: the second Send is skipped.
	for range 2 {
		sent, _, err := sqsonce.Send(ctx, guard, client, "report:daily", time.Hour, &sqs.SendMessageInput{
			QueueUrl: q.QueueUrl, MessageBody: aws.String(`{"report":"daily"}`),
		})
		if err != nil {
			return fmt.Errorf("send report: %w", err)
		}
		fmt.Printf("send report:daily: sent=%v\n", sent)
	}

	var effects atomic.Int64
	all := make(chan struct{})
	handle := func(ctx context.Context, m types.Message) error {
		fmt.Printf("handled %s\n", aws.ToString(m.Body))
		if effects.Add(1) == jobs+1 {
			close(all)
		}
		return nil
	}
	poller, err := sqsonce.NewPoller(guard, client, queueURL, handle, &sqsonce.PollerConfig{
		Config:   sqsonce.Config{KeyAttribute: "job"},
		WaitTime: time.Second,
	})
	if err != nil {
		return err
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- poller.Run(pctx) }()
	select {
	case <-all:
	case <-ctx.Done():
	case <-time.After(time.Minute):
		fmt.Println("timed out")
	}
	// Let the last copies be received and deleted, then stop gracefully.
	for deadline := time.Now().Add(30 * time.Second); poller.Stats().Deleted < 2*jobs+1 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		return err
	}
	s := poller.Stats()
	fmt.Printf("%d deliveries: %d ran, %d duplicates skipped, %d deleted\n", s.Received, s.Ran, s.Duplicates, s.Deleted)
	return nil
}
