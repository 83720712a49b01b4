package lambdaonce

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	sqsonce "github.com/jobonce/jobonce/adapters/sqs"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/nilcheck"
)

// HandlerFunc handles one SQS record. An error leaves the record in the
// queue, to be received again.
type HandlerFunc func(ctx context.Context, m events.SQSMessage) error

// Handler is the function Wrap returns, for lambda.Start. Its response
// lists the records to be received again (BatchItemFailures).
type Handler func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error)

// Client is the part of the SQS API the handler uses to set the visibility
// of records that wait. *sqs.Client satisfies it.
type Client interface {
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
}

var _ Client = (*sqs.Client)(nil)

// Config sets the handler's keys, delays and limits. A nil *Config gives the
// defaults. The Config is copied, so later changes to it have no effect.
type Config struct {
	// SQS holds the keys and delays, as sqsonce's Poller takes them. With
	// the same settings, a record gets the same key here as there.
	// SQS.Key gets the record as a types.Message. Defaults to the zero
	// sqsonce.Config.
	SQS sqsonce.Config

	// Client sets the visibility of the records that wait, in
	// ChangeMessageVisibilityBatch calls of up to ten records. The
	// function's role then needs sqs:ChangeMessageVisibility. Defaults to
	// nil: no visibility is changed, and such records come back when the
	// queue's visibility timeout lapses.
	Client Client

	// QueueURL returns the URL of the queue named by a record's event
	// source ARN, for an SQS endpoint of your own. Defaults to nil:
	// https://sqs.<region>.amazonaws.com/<account>/<queue>, or
	// amazonaws.com.cn in China.
	QueueURL func(arn string) string

	// Margin is how long before the invocation's deadline the handlers'
	// contexts end and claims stop. The markers, releases and visibility
	// changes are written in it, before Lambda stops the function.
	// Defaults to 2s.
	Margin time.Duration

	// Concurrency bounds the handlers running at once. A larger batch is
	// claimed and run in parts of this size. Defaults to 10.
	Concurrency int
}

// flushDelay is how long the done markers of a part's finished handlers
// wait for the part's other handlers, so that they are written in one store
// round trip.
const flushDelay = 5 * time.Millisecond

// sqsTimeout bounds the visibility changes of one invocation.
const sqsTimeout = 10 * time.Second

// maxBatch is the most entries SQS takes in one batch call.
const maxBatch = 10

// Wrap returns a handler for Lambda's SQS event source mapping that runs h
// once per key. The response's BatchItemFailures lists the records to be
// received again, so subscribe the function with ReportBatchItemFailures.
// Each part of a batch (Config.Concurrency records) is claimed in one store
// round trip, and its done markers are written in one more.
//
// A record is left out of BatchItemFailures, so the mapping deletes it,
// when its handler succeeded or its job is done. Every other record is
// listed: a failed handler, a job running elsewhere, a conflict, an invalid
// key, a store outage, or the deadline less Config.Margin coming first. On
// a FIFO queue, a group's records after a listed one are listed too,
// unrun. docs/lambda.md explains each case.
//
// The handler returns an error, listing every record, only when no record
// could be judged. That is when the store could not be reached (an error
// matching core.ErrStoreUnavailable) or the deadline came first. For an
// event that no event source mapping sends, it runs nothing and returns an
// error naming the bad records. Wrap returns an error for a nil Guard or
// handler, or an invalid Config.
func Wrap(g *core.Guard, h HandlerFunc, cfg *Config) (Handler, error) {
	if g == nil {
		return nil, errors.New("jobonce: lambdaonce: Wrap: Guard is nil")
	}
	if h == nil {
		return nil, errors.New("jobonce: lambdaonce: Wrap: handler is nil")
	}
	w := &wrapper{g: g, h: h}
	if cfg != nil {
		w.cfg = *cfg
	}
	if nilcheck.IsNil(w.cfg.Client) {
		w.cfg.Client = nil
	}
	switch {
	case w.cfg.Margin < 0:
		return nil, fmt.Errorf("jobonce: lambdaonce: Config.Margin must not be negative, got %s", w.cfg.Margin)
	case w.cfg.Margin == 0:
		w.cfg.Margin = 2 * time.Second
	}
	switch {
	case w.cfg.Concurrency < 0:
		return nil, fmt.Errorf("jobonce: lambdaonce: Config.Concurrency must not be negative, got %d", w.cfg.Concurrency)
	case w.cfg.Concurrency == 0:
		w.cfg.Concurrency = 10
	}
	// The Config's own checks, on a queue of no importance.
	if _, err := w.cfg.SQS.Rules(g, "https://sqs.us-east-1.amazonaws.com/000000000000/check"); err != nil {
		return nil, err
	}
	w.log = w.cfg.SQS.Logger
	if w.log == nil {
		w.log = g.Logger()
	}
	return w.handle, nil
}

type wrapper struct {
	g      *core.Guard
	h      HandlerFunc
	cfg    Config
	log    *slog.Logger
	queues sync.Map    // event source ARN → *queue
	warned atomic.Bool // about a visibility not changed for want of a Client
}

// queue is one event source: an SQS queue.
type queue struct {
	url   string
	name  string
	fifo  bool
	rules *sqsonce.Rules
}

// queueOf returns the queue named by an SQS event source ARN
// (arn:partition:sqs:region:account:name), or an error.
func (w *wrapper) queueOf(arn string) (*queue, error) {
	if q, ok := w.queues.Load(arn); ok {
		return q.(*queue), nil
	}
	parts := strings.Split(arn, ":")
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "sqs" || parts[3] == "" || parts[4] == "" || parts[5] == "" {
		return nil, fmt.Errorf("eventSourceARN %q is not an SQS queue's ARN", arn)
	}
	region, account, name := parts[3], parts[4], parts[5]
	host := "sqs." + region + ".amazonaws.com"
	if strings.HasPrefix(parts[1], "aws-cn") {
		host += ".cn"
	}
	q := &queue{url: "https://" + host + "/" + account + "/" + name, name: name, fifo: strings.HasSuffix(name, ".fifo")}
	var err error
	if q.rules, err = w.cfg.SQS.Rules(w.g, q.url); err != nil {
		return nil, err
	}
	if w.cfg.QueueURL != nil {
		if u := w.cfg.QueueURL(arn); u != "" {
			q.url = u
		}
	}
	actual, _ := w.queues.LoadOrStore(arn, q)
	return actual.(*queue), nil
}

// record is one record of the event as it is settled.
type record struct {
	ev       events.SQSMessage
	m        types.Message
	q        *queue
	group    string // FIFO: the queue's ARN and the message group
	job      core.Job
	receives int
	claim    *core.Claim
	out      core.Outcome
	err      error
	done     bool // settled
	failed   bool // listed in BatchItemFailures
	follower bool // FIFO: held back, unrun, behind its group's listed record
	hide     bool // change the visibility …
	delay    time.Duration
}

const (
	attrGroup        = "MessageGroupId"
	attrReceiveCount = "ApproximateReceiveCount"
)

// check returns the records of ev, or an error naming every record that no
// event source mapping would send.
func (w *wrapper) check(ev events.SQSEvent) ([]*record, error) {
	if len(ev.Records) == 0 {
		return nil, errors.New("jobonce: lambdaonce: the event holds no SQS records: invoke the function through an SQS event source mapping")
	}
	recs := make([]*record, len(ev.Records))
	var errs []error
	for i, ev := range ev.Records {
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("jobonce: lambdaonce: record %d (messageId %q): "+format, append([]any{i, ev.MessageId}, args...)...))
		}
		q, err := w.queueOf(ev.EventSourceARN)
		switch {
		case ev.MessageId == "":
			bad("has no messageId, which BatchItemFailures names it by")
		case ev.ReceiptHandle == "":
			bad("has no receiptHandle")
		case err != nil:
			bad("%v", err)
		case q.fifo && ev.Attributes[attrGroup] == "":
			bad("comes from FIFO queue %s but has no %s attribute", q.name, attrGroup)
		}
		if len(errs) > 0 {
			continue
		}
		r := &record{ev: ev, m: message(ev), q: q, receives: 1}
		if q.fifo {
			r.group = ev.EventSourceARN + "\x00" + ev.Attributes[attrGroup]
		}
		if n, err := strconv.Atoi(ev.Attributes[attrReceiveCount]); err == nil && n > 0 {
			r.receives = n
		}
		recs[i] = r
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w; no record was run", errors.Join(errs...))
	}
	return recs, nil
}

// message returns the record as sqsonce's rules take it.
func message(ev events.SQSMessage) types.Message {
	m := types.Message{
		MessageId:     aws.String(ev.MessageId),
		ReceiptHandle: aws.String(ev.ReceiptHandle),
		Body:          aws.String(ev.Body),
		Attributes:    ev.Attributes,
	}
	if ev.Md5OfBody != "" {
		m.MD5OfBody = aws.String(ev.Md5OfBody)
	}
	if ev.Md5OfMessageAttributes != "" {
		m.MD5OfMessageAttributes = aws.String(ev.Md5OfMessageAttributes)
	}
	if len(ev.MessageAttributes) > 0 {
		m.MessageAttributes = make(map[string]types.MessageAttributeValue, len(ev.MessageAttributes))
		for k, a := range ev.MessageAttributes {
			m.MessageAttributes[k] = types.MessageAttributeValue{
				DataType: aws.String(a.DataType), StringValue: a.StringValue, BinaryValue: a.BinaryValue,
				StringListValues: a.StringListValues, BinaryListValues: a.BinaryListValues,
			}
		}
	}
	return m
}

// handle settles one event.
func (w *wrapper) handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	recs, err := w.check(ev)
	if err != nil {
		return events.SQSEventResponse{}, err
	}
	jctx, cancel := ctx, context.CancelFunc(func() {})
	if d, ok := ctx.Deadline(); ok {
		if left := time.Until(d); left <= w.cfg.Margin {
			return events.SQSEventResponse{}, fmt.Errorf("jobonce: lambdaonce: the invocation had %s left, no more than Config.Margin (%s): no record was run; "+
				"make the function's timeout longer than Margin plus the jobs' time, or lower Margin", left.Round(time.Millisecond), w.cfg.Margin)
		}
		jctx, cancel = context.WithDeadline(ctx, d.Add(-w.cfg.Margin))
	}
	defer cancel()

	pending := make([]*record, 0, len(recs))
	for _, r := range recs {
		job, err := r.q.rules.Job(jctx, r.m)
		if err != nil {
			w.log.ErrorContext(ctx, "jobonce: lambdaonce: no key for the record; it is left for redelivery, unrun",
				"queue", r.q.name, "message_id", r.ev.MessageId, "error", err)
			r.done, r.failed, r.out, r.err = true, true, core.Failed, err
			continue
		}
		r.job = job
		pending = append(pending, r)
	}
	// A record left unrun above holds its FIFO group's later records back.
	pending = blockFollowers(recs, pending)
	for len(pending) > 0 {
		part, rest := split(pending, w.cfg.Concurrency)
		w.run(ctx, jctx, part)
		pending = blockFollowers(recs, rest)
	}
	return w.respond(ctx, recs)
}

// split takes a part from pending: at most n records, the first of each key
// and of each FIFO message group. A later copy of a key comes in a later
// part, claimed once the first has settled, so it is a duplicate at once
// rather than a running copy; a FIFO group's records run one after the
// other, in order.
func split(pending []*record, n int) (part, rest []*record) {
	keys := make(map[string]bool, len(pending))
	groups := make(map[string]bool)
	for _, r := range pending {
		key := r.job.Key
		switch {
		case len(part) == n, key != "" && keys[key], r.group != "" && groups[r.group]:
			rest = append(rest, r)
			if r.group != "" {
				groups[r.group] = true // the group's order holds behind a record left for later
			}
			continue
		}
		if key != "" {
			keys[key] = true
		}
		if r.group != "" {
			groups[r.group] = true
		}
		part = append(part, r)
	}
	return part, rest
}

// blockFollowers settles the pending records that come, in the batch,
// after a record of their FIFO message group listed in BatchItemFailures:
// listed too, unrun, and handed back at once (visibility 0) so that the
// group comes back in order. It returns the records left.
func blockFollowers(recs, pending []*record) []*record {
	blocked := make(map[string]bool) // groups with a listed record so far
	behind := make(map[*record]bool) // records after one
	for _, r := range recs {
		if r.group == "" {
			continue
		}
		if blocked[r.group] {
			behind[r] = true
		}
		if r.done && r.failed {
			blocked[r.group] = true
		}
	}
	left := pending[:0]
	for _, r := range pending {
		if !behind[r] {
			left = append(left, r)
			continue
		}
		r.done, r.failed, r.follower, r.hide, r.delay = true, true, true, true, 0
	}
	return left
}

// result is a handler's outcome.
type result struct {
	r   *record
	res core.Result
	err error
}

// run claims a part of the batch in one go, runs the claimed handlers, at
// most Config.Concurrency at once, writes the done markers of those that
// succeeded together, and settles every record of the part.
func (w *wrapper) run(ctx, jctx context.Context, part []*record) {
	jobs := make([]core.Job, len(part))
	for i, r := range part {
		jobs[i] = r.job
	}
	claims := w.g.Claim(jctx, jobs...)
	results := make(chan result, len(part))
	running := 0
	for i, r := range part {
		r.claim = claims[i]
		if r.claim.Runs() {
			running++
			go w.work(jctx, r, results)
			continue
		}
		res, err := r.claim.Work(jctx, w.fn(r))
		w.settle(r, res.Outcome, err)
	}
	var ran []*record
	var flush <-chan time.Time
	var timer *time.Timer
	finish := func() {
		if len(ran) == 0 {
			return
		}
		cl := make([]*core.Claim, len(ran))
		for i, r := range ran {
			cl[i] = r.claim
		}
		// The Guard writes markers whatever the context, within its
		// StoreTimeout: the response waits for them only until it must go.
		written := make(chan []core.Outcome, 1)
		go func() { written <- w.g.Finish(context.WithoutCancel(ctx), cl...) }()
		settling, cancel := w.settling(ctx)
		select {
		case outs := <-written:
			for i, r := range ran {
				w.settle(r, outs[i], nil)
			}
		case <-settling.Done():
			w.log.WarnContext(ctx, "jobonce: lambdaonce: done markers not written half of Config.Margin before the invocation's deadline; their records ran and are deleted, and the markers are written if the function goes on",
				"records", len(ran), "margin", w.cfg.Margin)
			for _, r := range ran {
				w.settle(r, core.Unrecorded, nil)
			}
		}
		cancel()
		ran = ran[:0]
	}
	for running > 0 {
		select {
		case res := <-results:
			running--
			if res.res.Outcome == core.Ran && res.err == nil {
				ran = append(ran, res.r)
				if flush == nil && running > 0 {
					timer = time.NewTimer(flushDelay)
					flush = timer.C
				}
				continue
			}
			w.settle(res.r, res.res.Outcome, res.err)
		case <-flush:
			flush = nil
			finish()
		}
	}
	if timer != nil {
		timer.Stop()
	}
	finish()
}

// settling returns the context of the calls that settle the records after
// the handlers' contexts ended: not cancelled with ctx, but ended half of
// Config.Margin before the invocation's deadline, so that the response
// reaches Lambda before it stops the function.
func (w *wrapper) settling(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok {
		return context.WithDeadline(context.WithoutCancel(ctx), d.Add(-w.cfg.Margin/2))
	}
	return context.WithoutCancel(ctx), func() {}
}

// fn returns the job function of record r.
func (w *wrapper) fn(r *record) core.RunFunc {
	return func(ctx context.Context) ([]byte, error) { return nil, w.h(ctx, r.ev) }
}

// work runs record r's claimed job.
func (w *wrapper) work(ctx context.Context, r *record, results chan<- result) {
	var res core.Result
	var err error
	defer func() {
		if p := recover(); p != nil {
			res.Outcome, err = core.Failed, fmt.Errorf("jobonce: lambdaonce: handler panicked: %v", p)
			w.log.ErrorContext(ctx, "jobonce: lambdaonce: handler panicked; the record is left for redelivery",
				"queue", r.q.name, "message_id", r.ev.MessageId, "panic", p)
		}
		results <- result{r: r, res: res, err: err}
	}()
	res, err = r.claim.Work(ctx, w.fn(r))
	if res.Outcome == core.Failed && err != nil {
		w.log.WarnContext(ctx, "jobonce: lambdaonce: handler failed; the record is listed in BatchItemFailures and comes back for another attempt",
			"queue", r.q.name, "message_id", r.ev.MessageId, "error", err)
	}
}

// settle records what becomes of record r, whose claim ended in out and err.
func (w *wrapper) settle(r *record, out core.Outcome, err error) {
	deleted, hidden, delay := r.q.rules.Settle(out, err, r.receives)
	r.done, r.out, r.err = true, out, err
	r.failed, r.hide, r.delay = !deleted, hidden, delay
}

// respond changes the visibility of the records to hide and returns the
// response: the records listed in BatchItemFailures, and an error when no
// record could be judged.
func (w *wrapper) respond(ctx context.Context, recs []*record) (events.SQSEventResponse, error) {
	var resp events.SQSEventResponse
	judged := false
	var causes []error
	var hide []*record
	for _, r := range recs {
		if r.hide {
			hide = append(hide, r)
		}
		if !r.failed {
			judged = true
			continue
		}
		resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: r.ev.MessageId})
		switch {
		case r.follower:
		case r.out == core.Unavailable || r.out == core.Canceled:
			if r.err != nil && len(causes) < 3 {
				causes = append(causes, r.err)
			}
		default:
			judged = true
		}
	}
	w.hide(ctx, hide)
	if judged {
		return resp, nil
	}
	return resp, fmt.Errorf("jobonce: lambdaonce: no record of the batch could be claimed, and none ran: %w", errors.Join(causes...))
}

// hide sets each record's visibility to its delay, in batch calls of up to
// maxBatch records of one queue, hideCalls at once, all within sqsTimeout
// and half of Config.Margin before the invocation's deadline. A record
// whose change failed is logged; it comes back when its visibility lapses.
func (w *wrapper) hide(ctx context.Context, recs []*record) {
	if len(recs) == 0 {
		return
	}
	if w.cfg.Client == nil {
		if w.warned.CompareAndSwap(false, true) {
			r := recs[0]
			w.log.WarnContext(ctx, "jobonce: lambdaonce: a record is to come back after a delay, but Config.Client is nil: it comes back when the queue's visibility timeout lapses; set Config.Client (and allow sqs:ChangeMessageVisibility) to retry it after the delay",
				"queue", r.q.name, "message_id", r.ev.MessageId, "outcome", r.out.String(), "delay", r.delay)
		}
		return
	}
	var order []*queue
	byQueue := map[*queue][]*record{}
	for _, r := range recs {
		if _, ok := byQueue[r.q]; !ok {
			order = append(order, r.q)
		}
		byQueue[r.q] = append(byQueue[r.q], r)
	}
	// The calls share one budget: sqsTimeout, and half of Config.Margin
	// before the invocation's deadline, so that the response reaches Lambda
	// before it stops the function, whatever the calls do.
	settling, cancel := w.settling(ctx)
	defer cancel()
	budget, c2 := context.WithTimeout(settling, sqsTimeout)
	defer c2()
	var calls sync.WaitGroup
	slots := make(chan struct{}, hideCalls)
	for _, q := range order {
		for part := range slices.Chunk(byQueue[q], maxBatch) {
			calls.Go(func() {
				select {
				case slots <- struct{}{}:
					defer func() { <-slots }()
					w.hideBatch(budget, ctx, q, part)
				case <-budget.Done():
					w.hideFailed(ctx, part, budget.Err())
				}
			})
		}
	}
	done := make(chan struct{})
	go func() { calls.Wait(); close(done) }()
	select {
	case <-done:
	case <-budget.Done():
		select {
		case <-done: // the calls ended as the budget did
			return
		default:
		}
		// A call that ignores its context is left to end on its own; its
		// records are listed, and come back when their visibility lapses.
		w.log.WarnContext(ctx, "jobonce: lambdaonce: visibility changes outlasted their time (10 s, or half of Config.Margin before the deadline); the records not changed come back when their visibility lapses",
			"records", len(recs))
	}
}

// hideCalls bounds the visibility calls of one invocation in flight at once.
const hideCalls = 4

// hideBatch sets the visibility of at most maxBatch records of queue q in
// one call, within cctx; ctx is the invocation's, for the logs.
func (w *wrapper) hideBatch(cctx, ctx context.Context, q *queue, recs []*record) {
	entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(recs))
	for i, r := range recs {
		entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{
			Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(r.ev.ReceiptHandle), VisibilityTimeout: int32(r.delay / time.Second),
		}
	}
	out, err := func() (out *sqs.ChangeMessageVisibilityBatchOutput, err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("SQS client panicked: %v", p)
			}
		}()
		return w.cfg.Client.ChangeMessageVisibilityBatch(cctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(q.url), Entries: entries})
	}()
	failed := make(map[int]error, len(recs))
	switch {
	case err != nil:
		for i := range recs {
			failed[i] = err
		}
	case out == nil:
		for i := range recs {
			failed[i] = errors.New("SQS client returned no output and no error")
		}
	default:
		for _, f := range out.Failed {
			i, aerr := strconv.Atoi(aws.ToString(f.Id))
			if aerr != nil || i < 0 || i >= len(recs) {
				continue
			}
			failed[i] = fmt.Errorf("%s: %s", aws.ToString(f.Code), aws.ToString(f.Message))
		}
		done := make(map[int]bool, len(out.Successful))
		for _, s := range out.Successful {
			if i, aerr := strconv.Atoi(aws.ToString(s.Id)); aerr == nil {
				done[i] = true
			}
		}
		for i := range recs {
			if _, ok := failed[i]; !ok && !done[i] {
				failed[i] = errors.New("SQS answered neither success nor failure for the entry")
			}
		}
	}
	for i, r := range recs {
		if err, ok := failed[i]; ok {
			w.hideFailed(ctx, []*record{r}, err)
		}
	}
}

// hideFailed logs records whose visibility change failed with err.
func (w *wrapper) hideFailed(ctx context.Context, recs []*record, err error) {
	for _, r := range recs {
		w.log.WarnContext(ctx, "jobonce: lambdaonce: visibility change failed; the record comes back when its visibility lapses (for an SQS endpoint of your own, set Config.QueueURL)",
			"queue", r.q.name, "queue_url", r.q.url, "message_id", r.ev.MessageId, "visibility", r.delay, "error", err)
	}
}
