package sqsonce

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/jobonce/jobonce/core"
)

// batch is one received batch of messages, processed by one goroutine.
type batch struct {
	r        *session
	msgs     []types.Message
	jobs     []core.Job
	claims   []*core.Claim
	received time.Time
	extender *time.Timer // renews the open messages' visibility
	out      *callQueue  // issues the batch's SQS calls
	capped   bool        // the 12h visibility limit was reached and reported
	groups   []string    // FIFO message group ids
	open     []bool      // the message is not settled yet: keep it invisible
	removed  []bool      // the message was settled for deletion
	passed   []bool      // the message used up its attempts: its group goes on
	attempts []int       // handler runs in this batch
	retryAt  []time.Time // a failed message retried in place runs again then
	retries  []int       // failed messages of the current round to retry in place
	done     []int       // handlers succeeded; done markers to write
	deletes  []int       // messages to delete
	hides    []int       // messages whose visibility to change …
	delays   []int32     // … to these seconds
}

// result is a handler's outcome, sent by its goroutine.
type result struct {
	i   int
	out core.Outcome
	err error
}

// process settles one received batch, in rounds (see splitRound); each
// message holds a handler slot until it is settled or its handler returns
// (a FIFO message retried in place keeps its slot while it waits). A round
// waits for all its handlers, so a long handler delays the later rounds of
// its batch (the one copy of its job the batch keeps for later, and later
// messages of a FIFO group).
// The batch's SQS calls go through its callQueue, and process returns once they
// have returned.
func (r *session) process(msgs []types.Message, received time.Time) {
	defer r.batches.Done()
	n := len(msgs)
	b := &batch{r: r, msgs: msgs, received: received, out: startCallQueue(),
		claims: make([]*core.Claim, n), open: make([]bool, n), removed: make([]bool, n), passed: make([]bool, n),
		attempts: make([]int, n), retryAt: make([]time.Time, n), jobs: make([]core.Job, n), groups: make([]string, n)}
	defer b.out.close()
	pending := make([]int, 0, n)
	for i, m := range msgs {
		var err error
		b.jobs[i], err = r.o.job(m)
		b.groups[i] = m.Attributes[attrGroup]
		b.open[i] = true
		if err != nil {
			b.unkeyed(i, err)
			continue
		}
		if b.groups[i] != "" && r.givenUp.has(aws.ToString(m.MessageId)) {
			b.handBackGivenUp(i)
			continue
		}
		pending = append(pending, i)
	}
	b.flush()
	b.extender = time.NewTimer(time.Until(received.Add(r.vis / 2)))
	defer b.extender.Stop()
	defer func() {
		// Whatever went wrong, jobs that ran get their done markers, so
		// their claims do not outlive the batch.
		if p := recover(); p != nil {
			b.finish()
			panic(p)
		}
	}()
	results := make(chan result, n)
	for len(pending) > 0 {
		now := time.Now()
		round, spares, rest := splitRound(b.jobs, b.groups, pending, func(i int) bool { return !b.retryAt[i].After(now) })
		if len(round) == 0 { // no spares either: they come with a round
			if !b.pause(rest) {
				rest = b.abandonRetries(rest)
			}
			pending = b.handBackBlocked(rest)
			continue
		}
		b.round(round, spares, results)
		slices.Sort(b.retries)
		pending = b.handBackBlocked(merge(b.retries, rest))
		b.retries = b.retries[:0]
	}
}

// unkeyed settles message i, whose job could not be derived (a FIFO message
// without a MessageId, or a panic in Config.Key or Config.Fingerprint), as a
// failure: it is left for redelivery and the
// queue's redrive policy, unrun.
func (b *batch) unkeyed(i int, err error) {
	r := b.r
	r.o.Logger.ErrorContext(r.hctx, "jobonce: sqsonce: no key for the message; it is left for redelivery, unrun",
		"queue", r.o.queueName, "message_id", aws.ToString(b.msgs[i].MessageId), "error", err)
	b.settle(i, core.Failed, err)
	r.release(1)
}

// splitRound splits pending messages into a round, its spares and the
// rest. A round holds one message per key, so a later copy of a job in the
// same batch is claimed after the first one finished and is deleted as a
// duplicate at once, instead of being hidden as running; and one message
// per FIFO message group, so a group's messages run one after the other, in
// order. The rest keeps one such later copy of a key: the copies after it
// (outside FIFO groups) are the round's spares, claimed with it but
// without waiting, so that they settle at once (hidden as running, or
// deleted as duplicates) instead of holding handler slots while their job
// runs or waits. A message that is not ready (waiting to be retried in
// place) stays out of the round but holds its key and group all the same.
func splitRound(jobs []core.Job, groups []string, pending []int, ready func(i int) bool) (round, spares, rest []int) {
	round = pending[:0:0]
	var held, kept []int // kept: later copies, by key, in the rest
next:
	for _, i := range pending {
		for _, j := range append(held, round...) {
			if (jobs[i].Key != "" && jobs[i].Key == jobs[j].Key) || (groups[i] != "" && groups[i] == groups[j]) {
				switch {
				case groups[i] != "":
					rest = append(rest, i)
				case holdsKey(jobs, kept, jobs[i].Key):
					spares = append(spares, i)
				default:
					kept = append(kept, i)
					rest = append(rest, i)
				}
				continue next
			}
		}
		if ready != nil && !ready(i) {
			held = append(held, i)
			rest = append(rest, i)
			continue
		}
		round = append(round, i)
	}
	return round, spares, rest
}

// holdsKey reports whether one of messages idx has key, which is not empty.
func holdsKey(jobs []core.Job, idx []int, key string) bool {
	for _, i := range idx {
		if jobs[i].Key == key {
			return true
		}
	}
	return false
}

// merge merges two ascending lists of message indexes.
func merge(a, b []int) []int {
	out := make([]int, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if a[0] < b[0] {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return append(append(out, a...), b...)
}

// handBackBlocked hands the pending messages of a FIFO message group whose
// earlier message was not deleted back to the queue unhandled, as SQS
// expects to redeliver that group in order. It returns the pending messages
// left.
func (b *batch) handBackBlocked(pending []int) []int {
	left := pending[:0]
	for _, i := range pending {
		if b.blocked(i) {
			b.open[i] = false
			b.hides = append(b.hides, i)
			b.delays = append(b.delays, 0)
			b.r.release(1)
			continue
		}
		left = append(left, i)
	}
	b.flush()
	return left
}

// blocked reports whether message i belongs to a FIFO message group with a
// settled message that was neither deleted nor given up.
func (b *batch) blocked(i int) bool {
	if b.groups[i] == "" {
		return false
	}
	for j, g := range b.groups {
		if g == b.groups[i] && !b.open[j] && !b.removed[j] && !b.passed[j] {
			return true
		}
	}
	return false
}

// round claims messages idx, then their spares (see splitRound), in one
// store round trip, runs the handlers of the claimed ones and settles every
// message.
func (b *batch) round(idx, spares []int, results chan result) {
	r := b.r
	jobs := make([]core.Job, len(idx), len(idx)+len(spares))
	// A copy whose job runs elsewhere is held, waiting for that copy, within
	// its visibility (renewed meanwhile) less a quarter of it.
	limit := b.received.Add(r.vis - r.vis/4)
	for j, i := range idx {
		jobs[j] = b.jobs[i]
		if !jobs[j].Unguarded {
			jobs[j].WaitUntil = r.o.waitUntil(r.hctx, limit)
		}
	}
	for _, i := range spares {
		jobs = append(jobs, b.jobs[i]) // no wait: a spare settles at once
	}
	idx = append(idx[:len(idx):len(idx)], spares...)
	// The Guard bounds the claim by its StoreTimeout: a store that does not
	// answer in time is Unavailable, while the handlers' context ending (the
	// shutdown deadline) is Canceled.
	claims := r.p.guard.Claim(r.hctx, jobs...)

	running := 0
	for j, i := range idx {
		c := claims[j]
		b.claims[i] = c
		if c.Runs() {
			running++
			b.attempts[i]++
			r.handlers.Add(1)
			go r.work(i, c, b.msgs[i], results)
			continue
		}
		// The Guard decided this claim does not run: Work reports its
		// outcome without calling the handler.
		res, err := c.Work(r.hctx, r.handler(b.msgs[i]))
		r.release(1)
		b.settle(i, res.Outcome, err)
	}
	b.flush()
	if running > 0 {
		b.await(running, results)
	}
}

// handler returns the job function of message m.
func (r *session) handler(m types.Message) core.RunFunc {
	return func(ctx context.Context) ([]byte, error) { return nil, r.p.handler(ctx, m) }
}

// work runs the handler for one claimed message. Its handler slot is freed
// by the batch when it takes the result.
func (r *session) work(i int, c *core.Claim, m types.Message, results chan<- result) {
	var res core.Result
	var err error
	defer func() {
		if p := recover(); p != nil {
			res.Outcome, err = core.Failed, fmt.Errorf("jobonce: sqsonce: handler panicked: %v", p)
			r.o.Logger.ErrorContext(r.hctx, "jobonce: sqsonce: handler panicked; the message is left for redelivery",
				"queue", r.o.queueName, "message_id", aws.ToString(m.MessageId), "panic", p)
		}
		r.handlers.Add(-1)
		results <- result{i: i, out: res.Outcome, err: err}
	}()
	res, err = c.Work(r.hctx, r.handler(m))
}

// await collects the batch's handler results. Succeeded handlers' done
// markers are written together: when the batch's last handler returns, or
// FlushDelay after the first of them, whichever comes first. Meanwhile the
// open messages' visibility is renewed every half VisibilityTimeout.
func (b *batch) await(running int, results <-chan result) {
	r := b.r
	var flushTimer *time.Timer
	var flushC <-chan time.Time
	defer func() {
		if flushTimer != nil {
			flushTimer.Stop()
		}
	}()
	for running > 0 {
		select {
		case res := <-results:
			running--
			if res.out == core.Failed && b.failed(res.i) {
				b.retries = append(b.retries, res.i)
				continue
			}
			r.release(1)
			if res.out == core.Ran && res.err == nil {
				b.done = append(b.done, res.i)
				if running > 0 && flushC == nil {
					if flushTimer == nil {
						flushTimer = time.NewTimer(r.flush)
					} else {
						flushTimer.Reset(r.flush)
					}
					flushC = flushTimer.C
				}
				continue
			}
			b.settle(res.i, res.out, res.err)
			b.flush()
		case <-flushC:
			flushC = nil
			b.finish()
		case <-b.extender.C:
			b.extend()
			b.extender.Reset(r.vis / 2)
		}
	}
	b.finish()
}

// finish writes the pending done markers in one store round trip and
// deletes their messages. The markers are written even after Run's context
// is cancelled: the jobs ran.
func (b *batch) finish() {
	if len(b.done) == 0 {
		return
	}
	claims := make([]*core.Claim, len(b.done))
	for j, i := range b.done {
		claims[j] = b.claims[i]
	}
	outs := b.r.p.guard.Finish(context.WithoutCancel(b.r.hctx), claims...)
	for j, i := range b.done {
		b.settle(i, outs[j], nil)
	}
	b.done = b.done[:0]
	b.flush()
}
