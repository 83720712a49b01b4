package dynamostore_test

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/dynamostore"
	"github.com/jobonce/jobonce/core/storetest"
	"github.com/jobonce/jobonce/internal/testenv"
)

// TestChaos runs the randomized fault test on dynalite through a proxy
// that the test cuts now and then, on top of the faults the Chaos store
// injects, among them DynamoDB's throttling answer.
func TestChaos(t *testing.T) {
	testenv.Short(t)
	srv := dynalite(t)
	direct := newStore(t, srv, &dynamostore.Config{ClockSkew: 20 * time.Millisecond})
	u, err := url.Parse(srv.endpoint)
	require.NoError(t, err)
	flaky := testenv.StartFlaky(t, u.Host)
	transport := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 200 * time.Millisecond}).DialContext,
		MaxIdleConnsPerHost: 64,
	}
	t.Cleanup(transport.CloseIdleConnections)
	viaProxy, err := dynamostore.New(ctxT(t), client("http://"+flaky.Addr(), func(o *dynamodb.Options) {
		o.HTTPClient = &http.Client{Transport: transport}
	}), &dynamostore.Config{Table: direct.Table(), ClockSkew: 20 * time.Millisecond})
	require.NoError(t, err)
	throttled := throttledError(t)
	storetest.RunChaos(t, storetest.ChaosOptions{
		Store:    viaProxy,
		Verify:   direct,
		Duration: 750 * time.Millisecond,
		Cut:      func() { flaky.Cut(); transport.CloseIdleConnections() },
		Restore:  flaky.Restore,
		Refusal:  func() error { return throttled },
	})
}

// throttledError returns the error a Store gives for a claim that DynamoDB
// throttles until the claim's time runs short.
func throttledError(t *testing.T) error {
	s, _ := throttlingStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := s.Claim(ctx, driver.ClaimRequest{Key: "k", Token: driver.NewToken(), Lease: time.Second})
	require.ErrorIs(t, err, dynamostore.ErrThrottled)
	return err
}
