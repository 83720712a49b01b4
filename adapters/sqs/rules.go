package sqsonce

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/jobonce/jobonce/core"
)

// Rules applies a Config's keys and delays to the messages of one queue, for
// a consumer that is neither Decorate nor the Poller, such as the Lambda
// handler of adapters/lambda: one message gets the same key, and so shares
// its claim and done marker, whichever of them receives it.
type Rules struct{ o *options }

// Rules returns the rules of c (nil for the defaults) for the queue at
// queueURL, whose name alone matters, or an error naming what is invalid.
func (c *Config) Rules(g *core.Guard, queueURL string) (*Rules, error) {
	o, err := c.options(g, queueURL, callerNames{"Rules: Guard", "Rules: queue URL"})
	if err != nil {
		return nil, err
	}
	return &Rules{o: o}, nil
}

// Job returns message m's job: its key, fingerprint, kind and source, and a
// WaitUntil within Config.WaitRunning and within ctx's deadline less half a
// second, as Decorate's. It returns an error for a FIFO message without a
// MessageId and for a panic in Config.Key or Config.Fingerprint; the message
// is then left unrun.
func (r *Rules) Job(ctx context.Context, m types.Message) (core.Job, error) {
	job, err := r.o.job(m)
	if err == nil && !job.Unguarded {
		job.WaitUntil = r.o.waitUntil(ctx, time.Time{})
	}
	return job, err
}

// Settle says what becomes of a message, received receives times (its
// ApproximateReceiveCount), whose claim ended in out and err: deleted when
// its job ran or is done; otherwise kept and, when hidden is true, hidden for
// delay (a running copy: the larger of Config.RunningDelay and the claim's
// RetryAfter hint, doubled per earlier receive), else left to the queue's
// visibility timeout.
func (r *Rules) Settle(out core.Outcome, err error, receives int) (deleted, hidden bool, delay time.Duration) {
	d := r.o.decide(out, err, max(receives, 1), 0, false)
	return d.act == remove, d.act == hide, d.delay
}
