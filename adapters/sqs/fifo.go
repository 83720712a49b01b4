package sqsonce

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/jobonce/jobonce/core"
)

// A FIFO message that fails while later messages of its group wait in the
// same batch is retried in place, so its followers are not handed back
// unrun: every receive counts toward their maxReceiveCount, and a receive
// they could not use would bring them closer to the dead-letter queue. See
// the package doc.

// failed handles a failed run of message i. It reports true when the message
// is to be retried in place: it stays open (hidden) and its retry time is
// set. Otherwise the caller settles it; if it used up its attempts while its
// followers wait, it is given up first, so they go on.
func (b *batch) failed(i int) bool {
	r := b.r
	if r.maxReceives <= 0 || b.groups[i] == "" || !b.followed(i) {
		return false
	}
	if r.stopping.Load() {
		// The shutdown deadline cancelled this attempt: it is handed back,
		// not given up.
		return false
	}
	receives := receiveCount(b.msgs[i])
	if b.attempts[i] >= r.maxReceives-receives+1 {
		b.passed[i] = true
		r.givenUp.add(aws.ToString(b.msgs[i].MessageId))
		r.p.stats.givenUp.Add(1)
		r.o.Logger.WarnContext(r.hctx, "jobonce: sqsonce: a FIFO message used up its attempts in place; it is left for the dead-letter queue and its group goes on",
			"queue", r.o.queueName, "message_id", aws.ToString(b.msgs[i].MessageId), "group", b.groups[i], "attempts", b.attempts[i])
		return false
	}
	if r.rctx.Err() != nil {
		return false
	}
	base := b.r.o.FailureDelay
	if base == 0 {
		base = time.Second
	}
	delay := backoff(base, receives+b.attempts[i]-1, r.o.MaxDelay)
	if time.Since(b.received)+delay+r.vis > maxVisibility-visibilityMargin {
		return false // the group could not be kept hidden that long
	}
	r.p.stats.count(core.Failed)
	b.retryAt[i] = time.Now().Add(delay)
	return true
}

// followed reports whether later messages of message i's group wait in the
// batch.
func (b *batch) followed(i int) bool {
	for j := i + 1; j < len(b.msgs); j++ {
		if b.open[j] && b.groups[j] == b.groups[i] {
			return true
		}
	}
	return false
}

// pause waits until the first retry among pending is due, renewing the open
// messages' visibility meanwhile. It returns false, at once, when Run's
// context is cancelled.
func (b *batch) pause(pending []int) bool {
	var next time.Time
	for _, i := range pending {
		if t := b.retryAt[i]; !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	wait := time.NewTimer(time.Until(next))
	defer wait.Stop()
	for {
		select {
		case <-wait.C:
			return true
		case <-b.r.rctx.Done():
			return false
		case <-b.extender.C:
			b.extend()
			b.extender.Reset(b.r.vis / 2)
		}
	}
}

// abandonRetries settles the messages of pending waiting for a retry in
// place as the failures they are, as Run is stopping, and returns the other
// pending messages.
func (b *batch) abandonRetries(pending []int) []int {
	r := b.r
	left := pending[:0]
	for _, i := range pending {
		if b.retryAt[i].IsZero() {
			left = append(left, i)
			continue
		}
		b.retryAt[i] = time.Time{}
		b.open[i] = false
		b.place(i, r.o.decide(core.Failed, nil, receiveCount(b.msgs[i]), time.Since(b.received), r.stopping.Load()))
		r.release(1)
	}
	return left
}

// handBackGivenUp hands back, unrun, a message this Poller gave up earlier,
// for a second, so the redrive policy moves it to the dead-letter queue after
// its remaining receives; its group goes on.
func (b *batch) handBackGivenUp(i int) {
	r := b.r
	b.open[i] = false
	b.passed[i] = true
	r.p.stats.givenUp.Add(1)
	b.place(i, r.o.hide(time.Second, 1, time.Since(b.received)))
	r.release(1)
}

// givenUp remembers the ids of FIFO messages that used up their attempts in
// place, for as long as SQS could still redeliver them.
type givenUp struct {
	mu  sync.Mutex
	ids map[string]time.Time // message id → when to forget it
}

// givenUpLimit bounds the ids remembered.
const givenUpLimit = 10000

func (g *givenUp) add(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	if g.ids == nil {
		g.ids = map[string]time.Time{}
	}
	if len(g.ids) >= givenUpLimit {
		for k, until := range g.ids {
			if now.After(until) || len(g.ids) >= givenUpLimit {
				delete(g.ids, k)
			}
		}
	}
	g.ids[id] = now.Add(maxRetention)
}

func (g *givenUp) has(id string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	until, ok := g.ids[id]
	return ok && time.Now().Before(until)
}

// maxRetention is SQS's longest message retention period.
const maxRetention = 14 * 24 * time.Hour

// queueAttributes is the optional part of a Client that lets Run read the
// queue's redrive policy.
type queueAttributes interface {
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

var _ queueAttributes = (*sqs.Client)(nil)

// maxReceiveCount returns PollerConfig.MaxReceiveCount, or on a FIFO queue, when it
// is zero, the maxReceiveCount of the queue's redrive policy (0 when there is
// none or it cannot be read).
func (r *session) maxReceiveCount(ctx context.Context) int {
	if n := r.p.cfg.MaxReceiveCount; n != 0 || !r.o.fifo {
		return max(n, 0)
	}
	qa, ok := r.p.client.(queueAttributes)
	if !ok {
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, sqsTimeout)
	defer cancel()
	out, err := qa.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: r.url, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameRedrivePolicy},
	})
	if err == nil {
		var n int
		n, err = parseRedrivePolicy(out.Attributes[string(types.QueueAttributeNameRedrivePolicy)])
		if err == nil {
			return n
		}
	}
	r.o.Logger.WarnContext(ctx, "jobonce: sqsonce: could not read the queue's redrive policy; a failing FIFO message's followers are handed back unrun (set PollerConfig.MaxReceiveCount)",
		"queue", r.o.queueName, "error", err)
	return 0
}

// parseRedrivePolicy returns the maxReceiveCount of a RedrivePolicy
// attribute, or 0 when the attribute is empty.
func parseRedrivePolicy(policy string) (int, error) {
	if policy == "" {
		return 0, nil
	}
	var p struct {
		MaxReceiveCount json.RawMessage `json:"maxReceiveCount"`
	}
	if err := json.Unmarshal([]byte(policy), &p); err != nil {
		return 0, fmt.Errorf("jobonce: sqsonce: RedrivePolicy %q: %w", policy, err)
	}
	n, err := strconv.Atoi(strings.Trim(string(p.MaxReceiveCount), `"`))
	if err != nil || n < 1 {
		return 0, fmt.Errorf("jobonce: sqsonce: RedrivePolicy %q has no valid maxReceiveCount", policy)
	}
	return n, nil
}
