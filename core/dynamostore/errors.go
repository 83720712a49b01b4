package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go"
)

var (
	// ErrTableMissing reports that the keys table does not exist in the
	// client's region and account. Create it with Config.CreateTable, or
	// as docs/dynamodb.md shows.
	ErrTableMissing = errors.New("jobonce: dynamostore: table not found")

	// ErrKeySchema reports a table whose key schema is not the one the
	// Store needs: a binary partition key "k" and no sort key.
	ErrKeySchema = errors.New("jobonce: dynamostore: table has the wrong key schema")

	// ErrAccessDenied reports credentials that lack a permission the Store
	// needs. The error names the action; docs/dynamodb.md lists them.
	ErrAccessDenied = errors.New("jobonce: dynamostore: access denied")

	// ErrThrottled reports a write that DynamoDB refused for capacity or a
	// conflicting transaction until the call's context ran short. It is an
	// answer of a reachable store, never an outage: a core.Guard fails
	// closed on it, even with FailOpen.
	ErrThrottled = errors.New("jobonce: dynamostore: throttled by DynamoDB")

	// ErrItemTooLarge reports an item over DynamoDB's 400 KB limit. Keep a
	// core.Guard's Config.MaxResultSize at or below MaxResultSize.
	ErrItemTooLarge = errors.New("jobonce: dynamostore: item over DynamoDB's 400 KB limit")
)

// apiCode returns the error code of a DynamoDB answer, or "".
func apiCode(err error) string {
	var api smithy.APIError
	if errors.As(err, &api) {
		return api.ErrorCode()
	}
	return ""
}

// retryable reports whether err is an answer that says to try again soon.
func retryable(err error) bool {
	var ra *retryableAnswer
	if errors.As(err, &ra) {
		return true
	}
	switch apiCode(err) {
	case "ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded",
		"TransactionConflictException", "TransactionInProgressException", "LimitExceededException":
		return true
	}
	return false
}

// sdkRetryer is the client's retryer for the Store's calls: it sends a
// request again, up to three times with backoff under 100ms, when its
// connection failed or DynamoDB answered 5xx, never when it was throttled.
// The Store retries throttled writes itself (retryThrottled), within the call's
// context, so that running short of time while throttled is reported as
// throttled, never as a timeout that looks like an outage.
var sdkRetryer = retry.NewStandard(func(o *retry.StandardOptions) {
	o.MaxAttempts = 3
	o.MaxBackoff = 100 * time.Millisecond
	o.Backoff = retry.NewExponentialJitterBackoff(100 * time.Millisecond)
	o.RateLimiter = ratelimit.None
	o.Retryables = []retry.IsErrorRetryable{
		retry.NoRetryCanceledError{},
		retry.RetryableConnectionError{},
		retry.RetryableHTTPStatusCode{Codes: retry.DefaultRetryableHTTPStatusCodes},
		retry.RetryableErrorCode{Codes: retry.DefaultRetryableErrorCodes},
	}
})

// noSDKRetry sets the Store's retryer (sdkRetryer) for one call.
func noSDKRetry(o *dynamodb.Options) { o.Retryer = sdkRetryer }

// firstBackoff and maxBackoff bound the waits between attempts of a
// throttled write.
const (
	firstBackoff = 10 * time.Millisecond
	maxBackoff   = 200 * time.Millisecond
	maxAttempts  = 8
)

// retryThrottled runs call until it returns something other than a retryable
// answer, waiting with jittered backoff between attempts while ctx leaves
// time for another, and returns its last error.
func retryThrottled(ctx context.Context, call func() error) error {
	wait := firstBackoff
	for attempt := 1; ; attempt++ {
		err := call()
		if err == nil || !retryable(err) || attempt == maxAttempts {
			return err
		}
		d := wait/2 + rand.N(wait/2+1)
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < 2*d {
			return err
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, maxBackoff)
	}
}

// fail turns the error of a call of action on the table into one that says
// what is wrong: the caller's context, a missing table, a wrong key
// schema, a missing permission, throttling, or DynamoDB's own answer.
func (s *Store) fail(ctx context.Context, action string, err error) error {
	if err == nil {
		return nil
	}
	ctxErr := ctx.Err()
	if retryable(err) {
		// Throttled until the context ran short: an answer, which the
		// Guard takes as such even when the context has ended since.
		if ctxErr != nil && !errors.Is(err, ctxErr) {
			return fmt.Errorf("%w: %s on table %q: %w (%w)", ErrThrottled, action, s.cfg.Table, err, ctxErr)
		}
		return fmt.Errorf("%w: %s on table %q: %w", ErrThrottled, action, s.cfg.Table, err)
	}
	if ctxErr != nil && !errors.Is(err, ctxErr) {
		return fmt.Errorf("jobonce: dynamostore: %s: %w (%w)", action, ctxErr, err)
	}
	code := apiCode(err)
	switch {
	case code == "ResourceNotFoundException":
		return fmt.Errorf("%w: %s on table %q: create it with Config.CreateTable or as docs/dynamodb.md shows: %w", ErrTableMissing, action, s.cfg.Table, err)
	case code == "AccessDeniedException" || code == "UnrecognizedClientException" || code == "MissingAuthenticationTokenException":
		return fmt.Errorf("%w: dynamodb:%s on table %q: %w", ErrAccessDenied, action, s.cfg.Table, err)
	case code == "ValidationException" && strings.Contains(err.Error(), "key element does not match the schema"):
		return fmt.Errorf("%w: table %q must have a partition key %q of type B and no sort key: %w", ErrKeySchema, s.cfg.Table, attrKey, err)
	case code == "ValidationException" && strings.Contains(strings.ToLower(err.Error()), "item size"):
		return fmt.Errorf("%w: %s on table %q: %w", ErrItemTooLarge, action, s.cfg.Table, err)
	}
	return fmt.Errorf("jobonce: dynamostore: %s on table %q: %w", action, s.cfg.Table, err)
}
