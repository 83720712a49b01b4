package sqsonce

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/jobonce/jobonce/core"
)

// sqsTimeout bounds each delete and visibility change, which run even after
// Run's context is cancelled.
const sqsTimeout = 10 * time.Second

// entryIDs are the Ids of batch request entries: an entry's position.
var entryIDs = [...]string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}

// settle decides what happens to message i after its final outcome.
func (b *batch) settle(i int, out core.Outcome, err error) {
	r := b.r
	b.open[i] = false
	b.retryAt[i] = time.Time{}
	r.p.stats.count(out)
	b.place(i, r.o.decide(out, err, receiveCount(b.msgs[i]), time.Since(b.received), r.stopping.Load()))
}

// place queues what decision d says for message i.
func (b *batch) place(i int, d decision) {
	switch d.act {
	case remove:
		b.removed[i] = true
		b.deletes = append(b.deletes, i)
	case hide:
		b.hides = append(b.hides, i)
		b.delays = append(b.delays, seconds(d.delay))
	}
}

// flush queues the settled deletes and visibility changes, a batch call
// each, on the batch's callQueue; it does not wait for them.
func (b *batch) flush() {
	if len(b.deletes) > 0 {
		b.delete(b.deletes)
		b.deletes = b.deletes[:0]
	}
	if len(b.hides) > 0 {
		b.changeVisibility(b.hides, b.delays)
		b.hides, b.delays = b.hides[:0], b.delays[:0]
	}
}

// extend renews the visibility of the open messages.
func (b *batch) extend() {
	r := b.r
	if r.abandoned.Load() {
		return // Run returned: let the queue redeliver the messages
	}
	v := min(r.vis, maxVisibility-visibilityMargin-time.Since(b.received))
	if v < time.Second {
		if !b.capped {
			b.capped = true
			r.o.Logger.WarnContext(r.hctx, "jobonce: sqsonce: a handler ran into SQS's 12h visibility limit; its message may be redelivered",
				"queue", r.o.queueName)
		}
		return
	}
	var idx []int
	var delays []int32
	for i, open := range b.open {
		if open {
			idx = append(idx, i)
			delays = append(delays, seconds(v))
		}
	}
	if len(idx) > 0 {
		b.changeVisibility(idx, delays)
	}
}

// delete queues a DeleteMessageBatch for messages idx.
func (b *batch) delete(idx []int) {
	r := b.r
	idx = append([]int(nil), idx...)
	entries := make([]types.DeleteMessageBatchRequestEntry, len(idx))
	for j, i := range idx {
		entries[j] = types.DeleteMessageBatchRequestEntry{Id: &entryIDs[j], ReceiptHandle: b.msgs[i].ReceiptHandle}
	}
	b.out.push(func() {
		out, err := call(r, func(ctx context.Context) (*sqs.DeleteMessageBatchOutput, error) {
			return r.p.client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: r.url, Entries: entries})
		})
		if err != nil {
			r.p.stats.deleteErrors.Add(int64(len(idx)))
			r.o.Logger.WarnContext(r.hctx, "jobonce: sqsonce: delete failed; the messages come back as duplicates",
				"queue", r.o.queueName, "messages", len(idx), "message_ids", b.messageIDs(idx), "error", err)
			return
		}
		r.p.stats.deleted.Add(int64(len(out.Successful)))
		for _, f := range out.Failed {
			r.p.stats.deleteErrors.Add(1)
			r.o.Logger.WarnContext(r.hctx, "jobonce: sqsonce: delete failed; the message comes back as a duplicate",
				"queue", r.o.queueName, "message_id", b.messageID(idx, f.Id), "code", aws.ToString(f.Code), "error", aws.ToString(f.Message))
		}
	})
}

// changeVisibility queues a ChangeMessageVisibilityBatch setting messages
// idx to delays.
func (b *batch) changeVisibility(idx []int, delays []int32) {
	r := b.r
	idx = append([]int(nil), idx...)
	entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(idx))
	for j, i := range idx {
		entries[j] = types.ChangeMessageVisibilityBatchRequestEntry{
			Id: &entryIDs[j], ReceiptHandle: b.msgs[i].ReceiptHandle, VisibilityTimeout: delays[j],
		}
	}
	b.out.push(func() {
		out, err := call(r, func(ctx context.Context) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
			return r.p.client.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: r.url, Entries: entries})
		})
		if err != nil {
			r.p.stats.visibilityErrors.Add(int64(len(idx)))
			r.o.Logger.WarnContext(r.hctx, "jobonce: sqsonce: visibility change failed",
				"queue", r.o.queueName, "messages", len(idx), "message_ids", b.messageIDs(idx), "error", err)
			return
		}
		for _, f := range out.Failed {
			r.p.stats.visibilityErrors.Add(1)
			r.o.Logger.WarnContext(r.hctx, "jobonce: sqsonce: visibility change failed",
				"queue", r.o.queueName, "message_id", b.messageID(idx, f.Id), "code", aws.ToString(f.Code), "error", aws.ToString(f.Message))
		}
	})
}

// call makes one SQS call, bounded by sqsTimeout even after Run's context is
// cancelled. A panicking client is reported as a failed call.
func call[T any](r *session, f func(ctx context.Context) (*T, error)) (out *T, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.hctx), sqsTimeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, fmt.Errorf("jobonce: sqsonce: SQS client panicked: %v", p)
		}
	}()
	out, err = f(ctx)
	if err == nil && out == nil {
		err = errors.New("jobonce: sqsonce: SQS client returned no output and no error")
	}
	return out, err
}

// messageIDs returns the message ids of messages idx.
func (b *batch) messageIDs(idx []int) []string {
	ids := make([]string, len(idx))
	for j, i := range idx {
		ids[j] = aws.ToString(b.msgs[i].MessageId)
	}
	return ids
}

// messageID returns the message id of the batch entry with the given Id.
func (b *batch) messageID(idx []int, id *string) string {
	j, err := strconv.Atoi(aws.ToString(id))
	if err != nil || j < 0 || j >= len(idx) {
		return aws.ToString(id)
	}
	return aws.ToString(b.msgs[idx[j]].MessageId)
}
