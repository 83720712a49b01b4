package sqsonce

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/nilcheck"
)

// PollerConfig sets a Poller's receives, handlers and shutdown. A nil
// *PollerConfig gives the defaults.
type PollerConfig struct {
	// Config derives keys and sets delays, as for Decorate. Defaults to the
	// zero Config (its defaults).
	Config

	// Concurrency is how many handlers run at once. Defaults to 20.
	Concurrency int
	// Receivers is how many receives run at once. Defaults to 1.
	Receivers int
	// BatchSize is the most messages asked for per receive, from 1 to 10,
	// and at most Concurrency. A receive asks for no more than the free
	// handler slots, waiting up to 10ms for busy ones to free up.
	// Defaults to 10.
	BatchSize int
	// WaitTime is a receive's long-polling wait, in whole seconds up to
	// 20s. Defaults to 20s.
	WaitTime time.Duration
	// VisibilityTimeout is the visibility asked for on receive, in whole
	// seconds from 2s to 12h. It is renewed every half of it while the
	// message's handler runs. Defaults to 30s.
	VisibilityTimeout time.Duration
	// ShutdownTimeout is how long running handlers may go on after Run's
	// context is cancelled. Then their contexts are cancelled, and
	// unfinished messages go back to the queue. Defaults to 30s.
	ShutdownTimeout time.Duration
	// FlushDelay is the longest a succeeded handler's message waits for the
	// rest of its batch. Then its done marker is written and it is deleted.
	// Defaults to 20ms.
	FlushDelay time.Duration
	// MaxReceiveCount is the maxReceiveCount of the queue's redrive policy.
	// On a FIFO queue, it bounds the retries in place of a failing message
	// whose group waits behind it. When zero, Run reads the queue's
	// RedrivePolicy if the client has GetQueueAttributes, as *sqs.Client
	// does. When negative or unknown, nothing is retried in place.
	// Defaults to 0.
	MaxReceiveCount int
}

// Poller consumes a queue. It long-polls for batches, claims each batch's
// messages together and runs its handler with bounded concurrency. It
// records a batch's done markers in one store round trip and deletes the
// messages with DeleteMessageBatch. A running message's visibility is
// renewed, so a long job's message is not redelivered. Messages that must
// wait are settled as Decorate settles them. docs/sqs.md explains batches,
// FIFO groups and stopping.
type Poller struct {
	client  Client
	url     string
	guard   *core.Guard
	handler HandlerFunc
	cfg     PollerConfig // with its defaults
	o       *options

	running atomic.Bool
	stats   counters
	givenUp givenUp
}

// NewPoller returns a Poller that runs h once per key for the messages of
// the queue at queueURL, claiming them on g. It returns an error naming
// the problem for a nil Guard, client or handler, an empty queue URL or an
// invalid PollerConfig.
func NewPoller(g *core.Guard, client Client, queueURL string, h HandlerFunc, cfg *PollerConfig) (*Poller, error) {
	var c PollerConfig
	if cfg != nil {
		c = *cfg
	}
	o, err := c.Config.options(g, queueURL, "NewPoller")
	switch {
	case err != nil:
		return nil, err
	case nilcheck.IsNil(client):
		return nil, errors.New("jobonce: sqsonce: NewPoller: client is nil")
	case h == nil:
		return nil, errors.New("jobonce: sqsonce: NewPoller: handler is nil")
	case c.Concurrency < 0:
		return nil, fmt.Errorf("jobonce: sqsonce: PollerConfig.Concurrency must not be negative (0 means 20), got %d", c.Concurrency)
	case c.Receivers < 0:
		return nil, fmt.Errorf("jobonce: sqsonce: PollerConfig.Receivers must not be negative (0 means 1), got %d", c.Receivers)
	case c.BatchSize < 0 || c.BatchSize > 10:
		return nil, fmt.Errorf("jobonce: sqsonce: PollerConfig.BatchSize must be 0 (default 10) to 10, got %d", c.BatchSize)
	case c.WaitTime < 0 || c.WaitTime > 20*time.Second || c.WaitTime%time.Second != 0:
		return nil, fmt.Errorf("jobonce: sqsonce: PollerConfig.WaitTime must be whole seconds from 0 (default 20s) to 20s, got %s", c.WaitTime)
	case c.VisibilityTimeout != 0 && (c.VisibilityTimeout < 2*time.Second || c.VisibilityTimeout > maxVisibility || c.VisibilityTimeout%time.Second != 0):
		return nil, fmt.Errorf("jobonce: sqsonce: PollerConfig.VisibilityTimeout must be 0 (default 30s) or whole seconds from 2s to 12h, got %s", c.VisibilityTimeout)
	case c.ShutdownTimeout < 0:
		return nil, fmt.Errorf("jobonce: sqsonce: PollerConfig.ShutdownTimeout must not be negative, got %s", c.ShutdownTimeout)
	case c.FlushDelay < 0:
		return nil, fmt.Errorf("jobonce: sqsonce: PollerConfig.FlushDelay must not be negative, got %s", c.FlushDelay)
	}
	c.Concurrency = cmp.Or(c.Concurrency, 20)
	c.Receivers = cmp.Or(c.Receivers, 1)
	c.BatchSize = min(cmp.Or(c.BatchSize, 10), c.Concurrency)
	c.WaitTime = cmp.Or(c.WaitTime, 20*time.Second)
	c.VisibilityTimeout = cmp.Or(c.VisibilityTimeout, 30*time.Second)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, 30*time.Second)
	c.FlushDelay = cmp.Or(c.FlushDelay, 20*time.Millisecond)
	return &Poller{client: client, url: queueURL, guard: g, handler: h, cfg: c, o: o}, nil
}

// Run consumes the queue until ctx is cancelled. Then it stops receiving,
// lets running handlers finish within ShutdownTimeout, settles their
// messages and returns nil. No message whose handler did not succeed is
// deleted.
//
// Handlers whose contexts ShutdownTimeout cancelled get 5s more to return.
// If some still run, Run returns an error matching ErrHandlersRunning
// without them. Receive errors are logged and retried with a backoff. A
// queue that does not exist stops Run the same way, and Run returns the
// error. Run returns an error at once while another Run of p runs, and
// for a Poller that does not come from NewPoller.
func (p *Poller) Run(ctx context.Context) error {
	if p == nil || p.o == nil {
		return errors.New("jobonce: sqsonce: Poller.Run: the Poller does not come from NewPoller")
	}
	if !p.running.CompareAndSwap(false, true) {
		return errors.New("jobonce: sqsonce: Poller.Run is already running")
	}
	defer p.running.Store(false)
	c := &p.cfg
	r := &session{p: p, o: p.o, url: aws.String(p.url), givenUp: &p.givenUp,
		conc: c.Concurrency, receivers: c.Receivers, batch: int32(c.BatchSize), wait: seconds(c.WaitTime),
		vis: c.VisibilityTimeout, shutdown: c.ShutdownTimeout, flush: c.FlushDelay,
		slots: make(chan struct{}, c.Concurrency)}
	return r.run(ctx)
}

// session is one Run of a Poller, with the defaults applied.
type session struct {
	p         *Poller
	o         *options
	url       *string
	conc      int
	receivers int
	batch     int32
	wait      int32
	vis       time.Duration
	shutdown  time.Duration
	flush     time.Duration
	// maxReceives is the queue's maxReceiveCount, 0 when unknown.
	maxReceives int
	givenUp     *givenUp

	rctx context.Context // Run's context: cancelled when Run is to stop

	slots    chan struct{}
	hctx     context.Context // handlers' context: outlives Run's ctx until the shutdown deadline
	stopping atomic.Bool     // the shutdown deadline passed
	batches  sync.WaitGroup
	// handlers counts the handlers running.
	handlers atomic.Int64
	// abandoned is set when Run returned while handlers ran: their batches
	// no longer renew visibility.
	abandoned atomic.Bool
}

func (r *session) run(ctx context.Context) error {
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	r.hctx = hctx
	r.rctx = ctx
	r.maxReceives = r.maxReceiveCount(ctx)
	// A fatal receive error stops every receiver, then Run stops as on a
	// cancellation and returns it.
	rctx, stopReceiving := context.WithCancelCause(ctx)
	defer stopReceiving(nil)
	var receivers sync.WaitGroup
	for range r.receivers {
		receivers.Go(func() {
			if err := r.receive(rctx); err != nil {
				stopReceiving(err)
			}
		})
	}
	receivers.Wait()
	fatal := context.Cause(rctx)
	if ctx.Err() != nil {
		fatal = nil
	}

	done := make(chan struct{})
	go func() {
		r.batches.Wait()
		close(done)
	}()
	deadline := time.NewTimer(r.shutdown)
	defer deadline.Stop()
	select {
	case <-done:
		return fatal
	case <-deadline.C:
	}
	r.o.Logger.WarnContext(ctx, "jobonce: sqsonce: shutdown timeout passed; cancelling running handlers",
		"queue", r.o.queueName, "timeout", r.shutdown)
	r.stopping.Store(true)
	cancel()
	grace := time.NewTimer(shutdownGrace)
	defer grace.Stop()
	select {
	case <-done:
		return fatal
	case <-grace.C:
	}
	// Batches whose handlers all returned settle within bounded calls: wait
	// for them. Handlers that ignore their context are left running.
	n := r.handlers.Load()
	if n == 0 {
		<-done
		return fatal
	}
	r.abandoned.Store(true)
	r.o.Logger.ErrorContext(ctx, "jobonce: sqsonce: handlers ignore their cancelled contexts; Run returns without them and their messages come back when their visibility lapses",
		"queue", r.o.queueName, "handlers", n, "timeout", r.shutdown, "grace", shutdownGrace)
	return errors.Join(fatal, fmt.Errorf("%w: %d, %s after PollerConfig.ShutdownTimeout (%s) cancelled their contexts; their messages were not deleted",
		ErrHandlersRunning, n, shutdownGrace, r.shutdown))
}

// shutdownGrace is how long Run waits, after ShutdownTimeout cancelled the
// handlers' contexts, for the handlers to return.
const shutdownGrace = 5 * time.Second

// ErrHandlersRunning reports handlers still running when Run returned. They
// ignored their cancelled contexts for 5s. Their messages are not deleted,
// and nothing renews their visibility, so the queue redelivers them.
var ErrHandlersRunning = errors.New("jobonce: sqsonce: handlers still running after the shutdown timeout")

// receive long-polls until ctx is cancelled, handing each batch to a
// goroutine of its own. It returns an error only when the queue does not
// exist.
func (r *session) receive(ctx context.Context) error {
	var pause time.Duration
	for {
		n := r.acquire(ctx)
		if n == 0 {
			return nil
		}
		out, err := r.receiveBatch(ctx, n)
		received := time.Now()
		if err != nil {
			r.release(int(n))
			if ctx.Err() != nil {
				return nil
			}
			if errors.As(err, new(*types.QueueDoesNotExist)) {
				return fmt.Errorf("jobonce: sqsonce: receive from %s: %w", r.p.url, err)
			}
			pause = min(max(2*pause, 100*time.Millisecond), 10*time.Second)
			r.o.Logger.WarnContext(ctx, "jobonce: sqsonce: receive failed", "queue", r.o.queueName, "retry_in", pause, "error", err)
			if !sleep(ctx, pause) {
				return nil
			}
			continue
		}
		pause = 0
		msgs := out.Messages
		r.release(int(n) - len(msgs))
		if len(msgs) == 0 {
			continue
		}
		r.p.stats.received.Add(int64(len(msgs)))
		r.batches.Add(1)
		go r.process(msgs, received)
	}
}

// receiveBatch receives up to n messages. A panicking client is reported as
// a failed receive, which the receiver retries with a backoff.
func (r *session) receiveBatch(ctx context.Context, n int32) (out *sqs.ReceiveMessageOutput, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, fmt.Errorf("jobonce: sqsonce: SQS client panicked in ReceiveMessage: %v", p)
		}
	}()
	out, err = r.p.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    r.url,
		MaxNumberOfMessages:         n,
		WaitTimeSeconds:             r.wait,
		VisibilityTimeout:           seconds(r.vis),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	})
	if err == nil && out == nil {
		err = errors.New("jobonce: sqsonce: SQS client returned no output and no error")
	}
	return out, err
}

// receiveLinger is how long the receiver waits for busy handler slots to
// free up, so it can ask for a full batch rather than a fragment.
const receiveLinger = 10 * time.Millisecond

// acquire takes at least one free handler slot, waiting for it, then more,
// up to the batch size, waiting up to receiveLinger for them. It returns 0
// when ctx is done.
func (r *session) acquire(ctx context.Context) int32 {
	select {
	case r.slots <- struct{}{}:
	case <-ctx.Done():
		return 0
	}
	n := int32(1)
	for n < r.batch {
		select {
		case r.slots <- struct{}{}:
			n++
			continue
		default:
		}
		break
	}
	if n == r.batch {
		return n
	}
	linger := time.NewTimer(receiveLinger)
	defer linger.Stop()
	for n < r.batch {
		select {
		case r.slots <- struct{}{}:
			n++
		case <-linger.C:
			return n
		case <-ctx.Done():
			return n
		}
	}
	return n
}

func (r *session) release(n int) {
	for range n {
		<-r.slots
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
