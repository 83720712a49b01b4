// Command lambda is an AWS Lambda function that consumes an SQS queue through
// its event source mapping and runs each record's job once, reporting failed
// and running records in BatchItemFailures (lambdaonce). Subscribe it with
// FunctionResponseTypes ReportBatchItemFailures, and allow its role
// sqs:ChangeMessageVisibility on the queue. Claims are kept in the Redis at
// REDIS_URL (default redis://127.0.0.1:6379/0).
//
// Build it for the provided.al2023 runtime:
//
//	GOOS=linux GOARCH=arm64 go -C examples build -tags lambda.norpc -o bootstrap ./lambda
//
// Outside Lambda (no AWS_LAMBDA_RUNTIME_API), it says so and exits; run it
// under the Lambda Runtime Interface Emulator (aws-lambda-rie) to invoke it
// locally, with SQS_ENDPOINT naming a local SQS server.
package main

import (
	"cmp"
	"context"
	"errors"
	"log"
	"os"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/redis/go-redis/v9"

	lambdaonce "github.com/jobonce/jobonce/adapters/lambda"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/redisstore"
)

func main() {
	h, err := handler()
	if err != nil {
		log.Fatal(err)
	}
	if os.Getenv("AWS_LAMBDA_RUNTIME_API") == "" {
		log.Fatal("not running in Lambda (AWS_LAMBDA_RUNTIME_API is unset): deploy it, or run it under aws-lambda-rie")
	}
	lambda.Start(h)
}

// handler makes the Guard, the SQS client and the handler, once per
// execution environment.
func handler() (lambdaonce.Handler, error) {
	opt, err := redis.ParseURL(cmp.Or(os.Getenv("REDIS_URL"), "redis://127.0.0.1:6379/0"))
	if err != nil {
		return nil, err
	}
	opt.ContextTimeoutEnabled = true
	store, err := redisstore.New(redis.NewClient(opt), nil)
	if err != nil {
		return nil, err
	}
	guard, err := core.New(store, nil)
	if err != nil {
		return nil, err
	}
	// Lambda gives the function's role credentials in the environment.
	sqsOpts := sqs.Options{
		Region: cmp.Or(os.Getenv("AWS_REGION"), "us-east-1"),
		Credentials: aws.NewCredentialsCache(aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{
				AccessKeyID:     cmp.Or(os.Getenv("AWS_ACCESS_KEY_ID"), "test"),
				SecretAccessKey: cmp.Or(os.Getenv("AWS_SECRET_ACCESS_KEY"), "test"),
				SessionToken:    os.Getenv("AWS_SESSION_TOKEN"),
			}, nil
		})),
	}
	if ep := os.Getenv("SQS_ENDPOINT"); ep != "" {
		sqsOpts.BaseEndpoint = aws.String(ep)
	}
	cfg := &lambdaonce.Config{Client: sqs.New(sqsOpts)}
	return lambdaonce.Wrap(guard, func(ctx context.Context, m events.SQSMessage) error {
		if m.Body == "" {
			return errors.New("empty body") // listed in BatchItemFailures, received again
		}
		log.Printf("running %s once: %s", m.MessageId, m.Body)
		return nil
	}, cfg)
}
