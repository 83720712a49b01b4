package sqsonce

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/jobkey"
)

// maxVisibility is SQS's limit on a message's visibility timeout, counted from
// the receive.
const maxVisibility = 12 * time.Hour

// defaultWaitRunning is Config.WaitRunning's default.
const defaultWaitRunning = 5 * time.Second

// waitMargin is how long before its context's deadline Decorate stops
// waiting for a running copy, so that it hides the message in time.
const waitMargin = 500 * time.Millisecond

// waitUntil returns how long a message received at received waits for its
// running copy (core.Job.WaitUntil): Config.WaitRunning from now, within
// limit when set and within ctx's deadline less waitMargin. Zero: no wait.
func (o *options) waitUntil(ctx context.Context, limit time.Time) time.Time {
	if o.WaitRunning < 0 {
		return time.Time{}
	}
	until := time.Now().Add(o.WaitRunning)
	if !limit.IsZero() && limit.Before(until) {
		until = limit
	}
	if d, ok := ctx.Deadline(); ok && d.Add(-waitMargin).Before(until) {
		until = d.Add(-waitMargin)
	}
	return until
}

// Config sets how Decorate, Poller and Rules derive keys and how long they
// hide a message that must wait. A nil *Config gives the defaults. The
// Config is copied, so later changes to it have no effect.
type Config struct {
	// KeyAttribute names a message attribute (String, Number or Binary)
	// whose value is the message's key. A message that lacks it gets the
	// default key. Decorate leaves unrun a message with no message
	// attributes at all, with an error matching ErrMissingAttribute.
	// Defaults to "" (no attribute).
	KeyAttribute string

	// Key returns a message's key and overrides every default. An empty key
	// is invalid (core.ErrInvalidKey): the handler does not run and the
	// message is left for the dead-letter queue. Defaults to nil (the
	// default keys).
	Key func(m types.Message) string

	// Fingerprint returns the payload fingerprint stored with a claim. A key
	// found with a different fingerprint is a conflict. Return "" to skip
	// the check. Defaults to nil: core.Fingerprint of the body, except under
	// a standard queue's default key, which holds that hash already.
	Fingerprint func(m types.Message) string

	// RunningDelay is the shortest delay a message whose job runs elsewhere
	// is hidden for. The delay is the larger of RunningDelay and the Guard's
	// RetryAfter hint, doubled for every earlier receive. Defaults to 1s.
	RunningDelay time.Duration

	// FailureDelay hides a message whose handler failed, doubled for every
	// earlier receive. When zero, the visibility is left as it is.
	// Defaults to 0.
	FailureDelay time.Duration

	// UnavailableDelay hides a message that could not be claimed because the
	// store was unreachable, doubled for every earlier receive.
	// Defaults to 10s.
	UnavailableDelay time.Duration

	// MaxDelay caps every delay above. It must not exceed SQS's 12h limit.
	// Defaults to 12h.
	MaxDelay time.Duration

	// WaitRunning is how long a message whose job runs elsewhere waits for
	// that copy's outcome before it is hidden. It is deleted as a duplicate
	// once that copy's done marker is written. Its handler runs if that
	// copy's claim is released. The Guard bounds how many copies wait
	// (core.Config.WaitingShare). Decorate cannot renew the visibility
	// meanwhile, so keep WaitRunning under the receive's visibility
	// timeout. Negative: no wait. Defaults to 5s.
	WaitRunning time.Duration

	// Logger receives the adapter's warnings. Defaults to the Guard's
	// Logger.
	Logger *slog.Logger
}

// options is a Config with defaults applied, for one queue.
type options struct {
	Config
	queueName string
	fifo      bool // the queue's name ends in .fifo
}

// options returns c with its defaults for the queue at queueURL, or an error
// naming the problem; caller names the function given g and queueURL, for
// the errors about them.
func (c *Config) options(g *core.Guard, queueURL string, caller string) (*options, error) {
	if g == nil {
		return nil, errors.New("jobonce: sqsonce: " + caller + ": Guard is nil")
	}
	if queueURL == "" {
		return nil, errors.New("jobonce: sqsonce: " + caller + ": queue URL is empty")
	}
	name, ok := jobkey.SQSQueueName(queueURL)
	if !ok {
		return nil, fmt.Errorf("jobonce: sqsonce: %s: queue URL %q has no queue name", caller, queueURL)
	}
	o := &options{queueName: name, fifo: jobkey.SQSFIFO(name)}
	if c != nil {
		o.Config = *c
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"RunningDelay", o.RunningDelay}, {"FailureDelay", o.FailureDelay}, {"UnavailableDelay", o.UnavailableDelay}, {"MaxDelay", o.MaxDelay}} {
		if f.d < 0 {
			return nil, fmt.Errorf("jobonce: sqsonce: Config.%s must not be negative, got %s", f.name, f.d)
		}
	}
	if o.RunningDelay == 0 {
		o.RunningDelay = time.Second
	}
	if o.UnavailableDelay == 0 {
		o.UnavailableDelay = 10 * time.Second
	}
	if o.MaxDelay == 0 {
		o.MaxDelay = maxVisibility
	}
	if o.WaitRunning == 0 {
		o.WaitRunning = defaultWaitRunning
	}
	if o.MaxDelay > maxVisibility {
		return nil, fmt.Errorf("jobonce: sqsonce: Config.MaxDelay must not exceed SQS's 12h limit, got %s", o.MaxDelay)
	}
	if o.Logger == nil {
		o.Logger = g.Logger()
	}
	return o, nil
}
