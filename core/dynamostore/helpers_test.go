package dynamostore_test

import (
	"context"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core/dynamostore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// server is a DynamoDB implementation the tests run on.
type server struct {
	name     string
	endpoint string
}

// dynalite returns the test DynamoDB server that scripts/test.sh starts
// (TEST_DYNAMODB_ENDPOINT); without it the test fails.
func dynalite(t testing.TB) server {
	t.Helper()
	ep := os.Getenv("TEST_DYNAMODB_ENDPOINT")
	if ep == "" {
		t.Fatal("TEST_DYNAMODB_ENDPOINT is not set: run the tests through scripts/test.sh, which starts dynalite")
	}
	return server{name: "dynalite", endpoint: ep}
}

// servers returns dynalite and, when TEST_MOTO_ENDPOINT is set, moto: a
// test runs its behaviour on each. Without moto, it says so.
func servers(t *testing.T) []server {
	all := []server{dynalite(t)}
	if ep := os.Getenv("TEST_MOTO_ENDPOINT"); ep != "" {
		all = append(all, server{name: "moto", endpoint: ep})
	} else {
		t.Log("TEST_MOTO_ENDPOINT is not set: the behaviour tests run on dynalite only")
	}
	return all
}

// moto returns moto's endpoint, or skips the test, saying why, when
// TEST_MOTO_ENDPOINT is unset.
func moto(t *testing.T) server {
	ep := os.Getenv("TEST_MOTO_ENDPOINT")
	if ep == "" {
		t.Skip("TEST_MOTO_ENDPOINT is not set: this test needs DynamoDB transactions, which dynalite lacks")
	}
	return server{name: "moto", endpoint: ep}
}

// motoSerial returns the endpoint of moto serving one request at a time
// (scripts/moto_serial.py, TEST_MOTO_SERIAL_ENDPOINT), where each write and
// each transaction is atomic, or skips the test, saying why, when it is
// unset.
func motoSerial(t *testing.T) server {
	ep := os.Getenv("TEST_MOTO_SERIAL_ENDPOINT")
	if ep == "" {
		t.Skip("TEST_MOTO_SERIAL_ENDPOINT is not set: racing transactions need a server with atomic transactions; start scripts/moto_serial.py and set it to the URL it prints")
	}
	return server{name: "moto-serial", endpoint: ep}
}

// client returns a DynamoDB client of endpoint with test credentials.
func client(endpoint string, opts ...func(*dynamodb.Options)) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  aws.AnonymousCredentials{},
		HTTPClient:   &http.Client{Timeout: 10 * time.Second},
	}, append([]func(*dynamodb.Options){func(o *dynamodb.Options) {
		o.Credentials = staticCreds{}
	}}, opts...)...)
}

type staticCreds struct{}

func (staticCreds) Retrieve(context.Context) (aws.Credentials, error) {
	return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test", Source: "jobonce tests"}, nil
}

// tableName returns a table name unique to this test.
func tableName(t testing.TB) string {
	return "jobonce_test_" + testenv.RandomID(6)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newStore returns a Store on a new table of its own on srv, created by
// New, and deleted at the end of the test.
func newStore(t testing.TB, srv server, cfg *dynamostore.Config) *dynamostore.Store {
	t.Helper()
	c := dynamostore.Config{}
	if cfg != nil {
		c = *cfg
	}
	if c.Table == "" {
		c.Table = tableName(t)
	}
	c.CreateTable = true
	cl := client(srv.endpoint)
	s, err := dynamostore.New(ctxT(t), cl, &c)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = cl.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(c.Table)})
	})
	return s
}
