package chaos_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/dynamostore"
	"github.com/jobonce/jobonce/internal/testenv"
	"github.com/jobonce/jobonce/tests/chaos"
)

// TestDynamostore runs the harness on dynalite through a proxy that the
// test cuts now and then, on top of the faults the harness injects, among
// them DynamoDB's throttling answer.
func TestDynamostore(t *testing.T) {
	testenv.Short(t)
	endpoint := os.Getenv("TEST_DYNAMODB_ENDPOINT")
	if endpoint == "" {
		t.Fatal("TEST_DYNAMODB_ENDPOINT is not set: run the tests through scripts/test.sh, which starts dynalite")
	}
	table := "jobonce_chaos_" + testenv.RandomID(6)
	direct := dynamoStore(t, dynamoClient(endpoint), &dynamostore.Config{Table: table, CreateTable: true, ClockSkew: 20 * time.Millisecond})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = dynamoClient(endpoint).DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	})
	u, err := url.Parse(endpoint)
	require.NoError(t, err)
	flaky := testenv.StartFlaky(t, u.Host)
	transport := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 200 * time.Millisecond}).DialContext,
		MaxIdleConnsPerHost: 64,
	}
	t.Cleanup(transport.CloseIdleConnections)
	viaProxy := dynamoStore(t, dynamoClient("http://"+flaky.Addr(), func(o *dynamodb.Options) {
		o.HTTPClient = &http.Client{Transport: transport}
	}), &dynamostore.Config{Table: table, ClockSkew: 20 * time.Millisecond})
	throttled := throttledError(t)
	chaos.Run(t, chaos.Options{
		Store:    viaProxy,
		Verify:   direct,
		Duration: 750 * time.Millisecond,
		Cut:      func() { flaky.Cut(); transport.CloseIdleConnections() },
		Restore:  flaky.Restore,
		Refusal:  func() error { return throttled },
	})
}

func dynamoClient(endpoint string, opts ...func(*dynamodb.Options)) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test", Source: "jobonce tests"}, nil
		}),
		HTTPClient: &http.Client{Timeout: 10 * time.Second},
	}, opts...)
}

func dynamoStore(t *testing.T, c *dynamodb.Client, cfg *dynamostore.Config) *dynamostore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := dynamostore.New(ctx, c, cfg)
	require.NoError(t, err)
	return s
}

// throttledError returns the error a Store gives for a claim that DynamoDB
// throttles until the claim's time runs short: a server that describes a
// good table and answers every other call with
// ProvisionedThroughputExceededException stands in for DynamoDB at its
// capacity, which no test server reaches.
func throttledError(t *testing.T) error {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		if strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".DescribeTable") {
			_, _ = io.WriteString(w, `{"Table":{"TableName":"jobonce_keys","TableStatus":"ACTIVE",`+
				`"KeySchema":[{"AttributeName":"k","KeyType":"HASH"}],"AttributeDefinitions":[{"AttributeName":"k","AttributeType":"B"}]}}`)
			return
		}
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",`+
			`"message":"The level of configured provisioned throughput for the table was exceeded."}`)
	}))
	t.Cleanup(srv.Close)
	s := dynamoStore(t, dynamoClient(srv.URL), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := s.Claim(ctx, driver.ClaimRequest{Key: "k", Token: driver.NewToken(), Lease: time.Second})
	require.ErrorIs(t, err, dynamostore.ErrThrottled)
	return err
}
