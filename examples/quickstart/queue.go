package main

import (
	"sync"
	"sync/atomic"
	"time"
)

// queue is a tiny at-least-once queue: a delivery stays outstanding until a
// handler acknowledges it, a handler may hand it back with a delay, and a
// delivery abandoned by a crashed consumer comes back after the visibility
// timeout, as SQS, Asynq and River all do in their own ways.
type queue struct {
	ch          chan int // job ids
	deliveries  int      // first deliveries, redeliveries aside
	outstanding atomic.Int64
	drained     chan struct{}
	once        sync.Once
	timers      sync.WaitGroup
}

// newQueue delivers every job twice, the second copy gap positions after the
// first, as a retrying producer would.
func newQueue(jobs, gap int) *queue {
	q := &queue{ch: make(chan int, 4*jobs), drained: make(chan struct{})}
	order := make([]int, 0, 2*jobs)
	for i := range jobs {
		order = append(order, i)
		if i >= gap {
			order = append(order, i-gap)
		}
	}
	for i := max(jobs-gap, 0); i < jobs; i++ {
		order = append(order, i)
	}
	q.deliveries = len(order)
	for _, id := range order {
		q.outstanding.Add(1)
		q.ch <- id
	}
	return q
}

// ack marks one delivery handled.
func (q *queue) ack() {
	if q.outstanding.Add(-1) == 0 {
		q.once.Do(func() { close(q.drained) })
	}
}

// redeliver hands a delivery back after delay.
func (q *queue) redeliver(id int, delay time.Duration) {
	q.timers.Add(1)
	time.AfterFunc(delay, func() {
		defer q.timers.Done()
		q.ch <- id
	})
}

// wait blocks until every delivery was acknowledged, or the deadline passes.
func (q *queue) wait(deadline time.Duration) bool {
	select {
	case <-q.drained:
		return true
	case <-time.After(deadline):
		return false
	}
}

// acked returns how many deliveries were acknowledged.
func (q *queue) acked() int {
	return q.deliveries - int(q.outstanding.Load())
}
