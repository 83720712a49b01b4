package sqsonce_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/redis/go-redis/v9"

	sqsonce "github.com/jobonce/jobonce/adapters/sqs"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// A complete consumer: each message's job runs once, whatever the number of
// copies delivered, until the context is cancelled.
func ExamplePoller() {
	client := exampleSQS()
	queueURL, deleteQueue := exampleQueue(client)
	defer deleteQueue()
	// The same job sent twice, its key in a message attribute.
	for range 2 {
		_, err := client.SendMessage(context.Background(), &sqs.SendMessageInput{
			QueueUrl:    aws.String(queueURL),
			MessageBody: aws.String(`{"user":42}`),
			MessageAttributes: map[string]types.MessageAttributeValue{
				"job": {DataType: aws.String("String"), StringValue: aws.String("email:welcome:user-42")},
			},
		})
		if err != nil {
			log.Fatal(err)
		}
	}

	guard, closeStore := exampleGuard()
	defer closeStore()
	handle := func(ctx context.Context, m types.Message) error {
		fmt.Println("sending the welcome email", aws.ToString(m.Body))
		return nil
	}
	p, err := sqsonce.NewPoller(guard, client, queueURL, handle, &sqsonce.PollerConfig{
		Config:      sqsonce.Config{KeyAttribute: "job"},
		Concurrency: 32,
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()

	for p.Stats().Deleted < 2 && ctx.Err() == nil { // wait for both copies
		time.Sleep(10 * time.Millisecond)
	}
	cancel() // Run stops receiving, lets running handlers finish and returns
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	s := p.Stats()
	fmt.Printf("ran %d, duplicates %d, deleted %d\n", s.Ran, s.Duplicates, s.Deleted)
	// Output:
	// sending the welcome email {"user":42}
	// ran 1, duplicates 1, deleted 2
}

// A receive loop of one's own: the decorated handler settles each message
// itself (deletes it, or changes its visibility), so the loop only logs.
func ExampleDecorate() {
	client := exampleSQS()
	queueURL, deleteQueue := exampleQueue(client)
	defer deleteQueue()
	for range 2 { // the same message sent twice: its key is a hash of the body
		_, err := client.SendMessage(context.Background(), &sqs.SendMessageInput{
			QueueUrl: aws.String(queueURL), MessageBody: aws.String(`{"invoice":"2024-07-acme"}`),
		})
		if err != nil {
			log.Fatal(err)
		}
	}

	guard, closeStore := exampleGuard()
	defer closeStore()
	handle, err := sqsonce.Decorate(guard, client, queueURL, func(ctx context.Context, m types.Message) error {
		fmt.Println("charging", aws.ToString(m.Body))
		return nil
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	settled := 0
	for settled < 2 {
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(queueURL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			// The receive count lets delays grow; a FIFO key needs the deduplication id and group.
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		})
		if err != nil {
			log.Fatal(err)
		}
		for _, m := range out.Messages {
			if err := handle(ctx, m); err != nil {
				log.Printf("message %s left in the queue: %v", aws.ToString(m.MessageId), err)
				continue
			}
			settled++ // ran and deleted, or a duplicate deleted
		}
	}
	fmt.Println("settled", settled)
	// Output:
	// charging {"invoice":"2024-07-acme"}
	// settled 2
}

// Send publishes at most once per key and window, even on a standard queue.
func ExampleSend() {
	client := exampleSQS()
	queueURL, deleteQueue := exampleQueue(client)
	defer deleteQueue()
	guard, closeStore := exampleGuard()
	defer closeStore()
	for range 2 {
		sent, _, err := sqsonce.Send(context.Background(), guard, client, "invoice:2024-07:acme", 24*time.Hour,
			&sqs.SendMessageInput{QueueUrl: aws.String(queueURL), MessageBody: aws.String(`{"customer":"acme"}`)})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("sent:", sent)
	}
	// Output:
	// sent: true
	// sent: false
}

// exampleSQS returns a client for the SQS server the examples run against;
// in production, sqs.NewFromConfig(cfg) with the AWS configuration.
func exampleSQS() *sqs.Client { return sqsClient(os.Getenv("TEST_SQS_ENDPOINT")) }

// exampleQueue creates a queue of its own and returns its URL and a
// function that deletes it.
func exampleQueue(client *sqs.Client) (string, func()) {
	out, err := client.CreateQueue(context.Background(), &sqs.CreateQueueInput{
		QueueName: aws.String("example-" + testenv.RandomID(6)),
	})
	if err != nil {
		log.Fatal(err)
	}
	return aws.ToString(out.QueueUrl), func() {
		_, _ = client.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: out.QueueUrl})
	}
}

// exampleGuard returns a Guard on Redis, with a key prefix of its own for
// each run of an example so that examples run again start afresh, and a
// function that closes its Redis client.
func exampleGuard() (*core.Guard, func()) {
	opt, err := redis.ParseURL(testenv.RedisURL())
	if err != nil {
		log.Fatal(err)
	}
	opt.ContextTimeoutEnabled = true // calls end with their context
	rdb := redis.NewClient(opt)
	store, err := redisstore.New(rdb, nil)
	if err != nil {
		log.Fatal(err)
	}
	guard, err := core.New(store, &core.Config{KeyPrefix: "example:" + testenv.RandomID(8) + ":"})
	if err != nil {
		log.Fatal(err)
	}
	return guard, func() { _ = rdb.Close() }
}
