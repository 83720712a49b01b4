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
)

// exampleGuard returns a Guard on the Redis at REDIS_URL.
func exampleGuard() *core.Guard {
	opt, err := redis.ParseURL(os.Getenv("REDIS_URL"))
	if err != nil {
		log.Fatal(err)
	}
	store, err := redisstore.New(redis.NewClient(opt), nil)
	if err != nil {
		log.Fatal(err)
	}
	g, err := core.New(store, nil)
	if err != nil {
		log.Fatal(err)
	}
	return g
}

// A complete consumer: each message's job runs once, whatever the number of
// copies delivered, until the context is cancelled.
func ExamplePoller() {
	client := sqsClient(os.Getenv("SQS_ENDPOINT"))
	p := &sqsonce.Poller{
		Client:   client,
		QueueURL: os.Getenv("QUEUE_URL"),
		Guard:    exampleGuard(),
		Config:   &sqsonce.Config{KeyAttribute: "job"}, // keys like "email:welcome:user-42"
		Handler: func(ctx context.Context, m types.Message) error {
			fmt.Println("sending", aws.ToString(m.Body))
			return nil
		},
		Concurrency: 32,
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// A receive loop of one's own: the decorated handler settles each message
// itself (deletes it, or changes its visibility), so the loop only logs.
func ExampleDecorate() {
	client := sqsClient(os.Getenv("SQS_ENDPOINT"))
	queueURL := os.Getenv("QUEUE_URL")
	handle := sqsonce.Decorate(exampleGuard(), client, queueURL, func(ctx context.Context, m types.Message) error {
		fmt.Println("charging", aws.ToString(m.Body))
		return nil
	}, nil)

	ctx := context.Background()
	out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(queueURL), MaxNumberOfMessages: 10, WaitTimeSeconds: 20,
		// The receive count lets delays grow; the deduplication id is a FIFO key.
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range out.Messages {
		if err := handle(ctx, m); err != nil {
			log.Printf("message %s left in the queue: %v", aws.ToString(m.MessageId), err)
		}
	}
}

// Send publishes at most once per key and window, even on a standard queue.
func ExampleSend() {
	client := sqsClient(os.Getenv("SQS_ENDPOINT"))
	sent, _, err := sqsonce.Send(context.Background(), exampleGuard(), client, "invoice:2024-07:acme", 24*time.Hour,
		&sqs.SendMessageInput{QueueUrl: aws.String(os.Getenv("QUEUE_URL")), MessageBody: aws.String(`{"customer":"acme"}`)})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("sent:", sent)
}
