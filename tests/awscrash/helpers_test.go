package awscrash_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	lambdaonce "github.com/jobonce/jobonce/adapters/lambda"
	"github.com/jobonce/jobonce/internal/testenv"
)

var testCreds = aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
	return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test", Source: "jobonce tests"}, nil
})

// newSQS returns a client for the test SQS server (fauxqs).
func newSQS(t testing.TB) *sqs.Client {
	t.Helper()
	return sqs.New(sqs.Options{BaseEndpoint: aws.String(testenv.SQSEndpoint(t)), Region: "us-east-1", Credentials: testCreds})
}

// dynamoEndpoint returns the endpoint named by env: TEST_DYNAMODB_ENDPOINT
// (dynalite, which scripts/test.sh starts), without which the test fails,
// or TEST_MOTO_SERIAL_ENDPOINT (scripts/moto_serial.py: moto serving one
// request at a time, whose transactions are atomic), without which the test
// is skipped, saying why.
func dynamoEndpoint(t testing.TB, env string) string {
	t.Helper()
	ep := os.Getenv(env)
	switch {
	case ep != "":
		return ep
	case env == envMotoSerial:
		t.Skip(envMotoSerial + " is not set: the transactional mode needs DynamoDB transactions, which dynalite lacks; start scripts/moto_serial.py and set it to the URL it prints")
	default:
		t.Fatal(env + " is not set: run the tests through scripts/test.sh, which starts dynalite")
	}
	return ""
}

const (
	envDynalite   = "TEST_DYNAMODB_ENDPOINT"
	envMotoSerial = "TEST_MOTO_SERIAL_ENDPOINT"
)

// newDynamo returns a DynamoDB client of endpoint.
func newDynamo(endpoint string) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		BaseEndpoint: aws.String(endpoint), Region: "us-east-1", Credentials: testCreds,
		HTTPClient: &http.Client{Timeout: 10 * time.Second},
	})
}

// createEffects creates a table of effects, one item per run of a job
// (partition key "job", sort key "run"), deleted at the end of the test, and
// returns its name.
func createEffects(t testing.TB, db *dynamodb.Client) string {
	t.Helper()
	name := "jobonce_effects_" + testenv.RandomID(6)
	_, err := db.CreateTable(context.Background(), &dynamodb.CreateTableInput{
		TableName: aws.String(name),
		AttributeDefinitions: []dtypes.AttributeDefinition{
			{AttributeName: aws.String("job"), AttributeType: dtypes.ScalarAttributeTypeS},
			{AttributeName: aws.String("run"), AttributeType: dtypes.ScalarAttributeTypeS},
		},
		KeySchema: []dtypes.KeySchemaElement{
			{AttributeName: aws.String("job"), KeyType: dtypes.KeyTypeHash},
			{AttributeName: aws.String("run"), KeyType: dtypes.KeyTypeRange},
		},
		BillingMode: dtypes.BillingModePayPerRequest,
	})
	require.NoError(t, err)
	t.Cleanup(func() { deleteTable(db, name) })
	return name
}

func deleteTable(db *dynamodb.Client, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = db.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(name)})
}

// effect is the write of one run of job: an item of its own.
func effect(table, job string) *dtypes.Put {
	return &dtypes.Put{TableName: aws.String(table), Item: map[string]dtypes.AttributeValue{
		"job": &dtypes.AttributeValueMemberS{Value: job},
		"run": &dtypes.AttributeValueMemberS{Value: testenv.RandomID(12)},
	}}
}

// countEffects returns the runs of each job in the effects table.
func countEffects(t testing.TB, db *dynamodb.Client, table string) map[string]int {
	t.Helper()
	runs := map[string]int{}
	p := dynamodb.NewScanPaginator(db, &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		out, err := p.NextPage(context.Background())
		require.NoError(t, err)
		for _, it := range out.Items {
			job, ok := it["job"].(*dtypes.AttributeValueMemberS)
			require.True(t, ok, "an effect without its job: %v", it)
			runs[job.Value]++
		}
	}
	return runs
}

// The event source mapping harness below is adapters/lambda's (its
// esm_test.go and helpers_test.go), which a test of another module cannot
// import.

// testQueue is a queue of the test's own, deleted at cleanup.
type testQueue struct {
	url, arn string
}

// urlOf is a Config.QueueURL for the test server.
func (q testQueue) urlOf(arn string) string {
	if arn == q.arn {
		return q.url
	}
	return ""
}

// createQueue creates a standard queue with the visibility timeout given
// in seconds.
func createQueue(t testing.TB, c *sqs.Client, visibility int) testQueue {
	t.Helper()
	ctx := context.Background()
	out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName:  aws.String("jobonce-awscrash-" + testenv.RandomID(8)),
		Attributes: map[string]string{"VisibilityTimeout": strconv.Itoa(visibility)},
	})
	require.NoError(t, err)
	q := testQueue{url: aws.ToString(out.QueueUrl)}
	t.Cleanup(func() { _, _ = c.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(q.url)}) })
	a, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(q.url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	require.NoError(t, err)
	q.arn = a.Attributes[string(types.QueueAttributeNameQueueArn)]
	require.NotEmpty(t, q.arn)
	return q
}

// sendEachTwice sends jobs "job-0000"… side by side, each twice, ten to a
// call, several calls at once, and returns their ids.
func sendEachTwice(t testing.TB, c *sqs.Client, q testQueue, jobs int) []string {
	t.Helper()
	ids := make([]string, jobs)
	for i := range ids {
		ids[i] = fmt.Sprintf("job-%04d", i)
	}
	var wg sync.WaitGroup
	errs := make(chan error, jobs)
	sem := make(chan struct{}, 8)
	for first := 0; first < jobs; first += 5 {
		batch := ids[first:min(first+5, jobs)]
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			entries := make([]types.SendMessageBatchRequestEntry, 0, 2*len(batch))
			for i, id := range batch {
				for copy := range 2 {
					entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprintf("%d-%d", i, copy)), MessageBody: aws.String(id)})
				}
			}
			out, err := c.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(q.url), Entries: entries})
			switch {
			case err != nil:
				errs <- err
			case len(out.Failed) > 0:
				errs <- fmt.Errorf("%d messages not sent: %s", len(out.Failed), aws.ToString(out.Failed[0].Message))
			}
		})
	}
	wg.Wait()
	close(errs)
	require.NoError(t, errors.Join(func() (all []error) {
		for err := range errs {
			all = append(all, err)
		}
		return all
	}()...))
	return ids
}

// receive receives up to ten messages as an event source mapping does, with
// every attribute, waiting up to wait seconds for the first.
func receive(ctx context.Context, c *sqs.Client, q testQueue, wait int32) (events.SQSEvent, error) {
	out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(q.url), MaxNumberOfMessages: 10, WaitTimeSeconds: wait,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	})
	if err != nil {
		return events.SQSEvent{}, err
	}
	ev := events.SQSEvent{Records: make([]events.SQSMessage, len(out.Messages))}
	for i, m := range out.Messages {
		ev.Records[i] = events.SQSMessage{
			MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle),
			Body: aws.ToString(m.Body), Md5OfBody: aws.ToString(m.MD5OfBody),
			Attributes: m.Attributes, EventSourceARN: q.arn, EventSource: "aws:sqs", AWSRegion: "us-east-1",
		}
	}
	return ev, nil
}

// esm is a small event source mapping: it receives a batch, invokes the
// handler with it under a deadline as Lambda does, and deletes the records
// that succeeded (none when the handler returned an error).
type esm struct {
	c       *sqs.Client
	q       testQueue
	h       lambdaonce.Handler
	timeout time.Duration // the function's timeout
}

// poll runs one receive and invocation.
func (e esm) poll(ctx context.Context) error {
	ev, err := receive(ctx, e.c, e.q, 1)
	if err != nil || len(ev.Records) == 0 {
		return err
	}
	ictx, cancel := context.WithTimeout(ctx, e.timeout)
	resp, herr := e.h(ictx, ev)
	cancel()
	if herr != nil {
		return nil
	}
	keep := map[string]bool{}
	for _, f := range resp.BatchItemFailures {
		keep[f.ItemIdentifier] = true
	}
	var entries []types.DeleteMessageBatchRequestEntry
	for i, r := range ev.Records {
		if !keep[r.MessageId] {
			entries = append(entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(r.ReceiptHandle)})
		}
	}
	if len(entries) == 0 {
		return nil
	}
	_, err = e.c.DeleteMessageBatch(context.WithoutCancel(ctx), &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(e.q.url), Entries: entries})
	return err
}

// run polls until ctx ends, on n goroutines (concurrent invocations).
func (e esm) run(ctx context.Context, n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				_ = e.poll(ctx)
			}
		})
	}
	wg.Wait()
}

// drained reports whether the queue holds no message, visible or not.
func drained(t testing.TB, c *sqs.Client, url string) bool {
	t.Helper()
	out, err := c.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		},
	})
	require.NoError(t, err)
	return out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)] == "0" &&
		out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)] == "0"
}
