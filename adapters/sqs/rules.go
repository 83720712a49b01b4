package sqsonce

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/jobonce/jobonce/core"
)

// Rules applies a Config's keys and delays to one queue's messages, for a
// consumer other than Decorate and the Poller, such as adapters/lambda. A
// message gets the same key, and so the same claim and done marker,
// whichever consumer receives it.
type Rules struct{ o *options }

// Rules returns the rules of c (nil for the defaults) for the queue at
// queueURL; only the queue's name matters. It returns an error naming what
// is invalid.
func (c *Config) Rules(g *core.Guard, queueURL string) (*Rules, error) {
	o, err := c.options(g, queueURL, "Rules")
	if err != nil {
		return nil, err
	}
	return &Rules{o: o}, nil
}

// Job returns message m's job: its key, fingerprint and kind. Its WaitUntil
// is Config.WaitRunning from now, at most half a second before ctx's
// deadline. It returns an error for a FIFO message without a MessageId, or
// when Config.Key or Config.Fingerprint panics; leave that message unrun.
func (r *Rules) Job(ctx context.Context, m types.Message) (core.Job, error) {
	job, err := r.o.job(m)
	if err == nil && !job.Unguarded {
		job.WaitUntil = r.o.waitUntil(ctx, time.Time{})
	}
	return job, err
}

// Settle says what becomes of a message whose claim ended in out and err;
// receives is its ApproximateReceiveCount. The message is deleted when its
// job ran or is done. Otherwise it is kept: hidden for delay when hidden is
// true, else left to the queue's visibility timeout.
func (r *Rules) Settle(out core.Outcome, err error, receives int) (deleted, hidden bool, delay time.Duration) {
	d := r.o.decide(out, err, max(receives, 1), 0, false)
	return d.act == remove, d.act == hide, d.delay
}
