package core

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/internal/storecall"
)

// unreachable reports whether err, the failure of a store call made for a
// caller whose context is ctx, says the store could not be reached: the
// only failure under which Config.FailOpen runs a job unguarded (or
// Enqueue publishes without a marker). It is an allow-list of transport
// failures:
//   - a net.Error (a dial refused, an i/o timeout), io.EOF or
//     io.ErrUnexpectedEOF (a connection closed mid-reply), ECONNREFUSED,
//     ECONNRESET or EPIPE;
//   - the Guard's StoreTimeout expiring (context.DeadlineExceeded, or a
//     shared round trip that outlived it) while ctx is still live;
//   - driver.ErrUnreachable, which a store wraps around its client's own
//     "cannot reach" errors.
//
// Everything else is not: an answer the server gave (a go-redis
// redis.Error, such as OOM or READONLY; a PostgreSQL error with a
// SQLSTATE; a DynamoDB error code), a write not acknowledged
// (ErrUnreplicated), a store call that panicked, a reply the Guard cannot
// read, the caller's own cancellation, and any error it does not know.
func unreachable(ctx context.Context, err error) bool {
	if err == nil || storecall.Ended(ctx) != nil || reachedStore(err) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, storecall.ErrStuck) {
		return true // the Guard's own StoreTimeout: ctx is live
	}
	if errors.Is(err, context.Canceled) {
		return false // not the caller's, and no timeout: nothing says the store is down
	}
	var netErr net.Error
	return errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, driver.ErrUnreachable)
}

// reachedStore reports whether err says the store was reached: the server
// answered with an error (go-redis's redis.Error has a RedisError method,
// pgconn.PgError a SQLState, the AWS SDK's APIError an ErrorCode), took a
// write it could not acknowledge, or the store call panicked. Such an error
// outranks a transport error or a timeout it may wrap (a WAIT whose
// connection broke is still an unacknowledged write; DynamoDB throttling a
// write until the call's time ran out is its answer).
func reachedStore(err error) bool {
	var redisErr interface{ RedisError() }
	var sqlErr interface{ SQLState() string }
	var apiErr interface{ ErrorCode() string }
	return errors.As(err, &redisErr) || errors.As(err, &sqlErr) || errors.As(err, &apiErr) ||
		errors.Is(err, ErrUnreplicated) || errors.Is(err, storecall.ErrPanicked) ||
		errors.Is(err, storecall.ErrBatchReplies) || errors.Is(err, ErrInvalidKey)
}
