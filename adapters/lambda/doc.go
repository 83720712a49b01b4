// Package lambdaonce runs each Amazon SQS record that AWS Lambda's event
// source mapping delivers once per key, on top of a jobonce Guard. Its
// handler answers with a partial batch response.
//
//	import lambdaonce "github.com/jobonce/jobonce/adapters/lambda"
//
//	h, err := lambdaonce.Wrap(guard, handle, &lambdaonce.Config{Client: sqsClient})
//	lambda.Start(h)
//
// The keys are sqsonce's (see Config.SQS), so a Lambda function and an
// sqsonce Poller can consume one queue and share its records.
// docs/lambda.md explains the setup and what happens to each record.
package lambdaonce
