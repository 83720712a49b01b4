package dynamostore_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/dynamostore"
)

// throttlingStore returns a Store on a server that describes a good table
// and answers every other call with ProvisionedThroughputExceededException,
// and the count of the calls it throttled. It stands in for DynamoDB at its
// capacity, which no test server reaches.
func throttlingStore(t *testing.T) (*dynamostore.Store, *atomic.Int64) {
	var throttled atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		if strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".DescribeTable") {
			_, _ = io.WriteString(w, `{"Table":{"TableName":"jobonce_keys","TableStatus":"ACTIVE",`+
				`"KeySchema":[{"AttributeName":"k","KeyType":"HASH"}],"AttributeDefinitions":[{"AttributeName":"k","AttributeType":"B"}]}}`)
			return
		}
		throttled.Add(1)
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",`+
			`"message":"The level of configured provisioned throughput for the table was exceeded."}`)
	}))
	t.Cleanup(srv.Close)
	s, err := dynamostore.New(context.Background(), client(srv.URL), nil)
	require.NoError(t, err)
	return s, &throttled
}

// TestThrottledIsAnAnswer: a throttled claim is retried with backoff
// (eight attempts, well within the context), then answered ErrThrottled,
// never a timeout; a Guard with FailOpen fails closed on it and does not
// run the job.
func TestThrottledIsAnAnswer(t *testing.T) {
	s, throttled := throttlingStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := s.Claim(ctx, driver.ClaimRequest{Key: "k", Token: driver.NewToken(), Lease: time.Second})
	require.ErrorIs(t, err, dynamostore.ErrThrottled)
	require.NotErrorIs(t, err, context.DeadlineExceeded, "an answer, not a timeout: %v", err)
	require.Contains(t, err.Error(), "ProvisionedThroughputExceeded")
	require.EqualValues(t, 8, throttled.Load(), "the claim was sent again after backoff, eight times in all")

	g, err := core.New(s, &core.Config{FailOpen: true, StoreTimeout: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })
	ran := false
	out, err := g.Do(context.Background(), "job", func(context.Context) error { ran = true; return nil })
	require.Equal(t, core.Unavailable, out, "FailOpen does not run through throttling: %v", err)
	require.ErrorIs(t, err, core.ErrStoreUnavailable)
	require.ErrorIs(t, err, dynamostore.ErrThrottled)
	require.False(t, ran)
}
