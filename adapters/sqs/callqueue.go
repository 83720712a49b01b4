package sqsonce

import "sync"

// callQueue issues a batch's SQS calls (deletes and visibility changes) one
// after the other, in the order they were queued, on a goroutine of its
// own, so the batch's loop never waits for SQS: a finished job's done marker
// is written while the calls for other messages are in flight.
type callQueue struct {
	mu     sync.Mutex
	queue  []func()
	closed bool
	wake   chan struct{}
	done   chan struct{}
}

func startCallQueue() *callQueue {
	s := &callQueue{wake: make(chan struct{}, 1), done: make(chan struct{})}
	go s.loop()
	return s
}

// push queues call; it never blocks.
func (s *callQueue) push(call func()) {
	s.mu.Lock()
	s.queue = append(s.queue, call)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// close waits until every queued call has returned.
func (s *callQueue) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	<-s.done
}

func (s *callQueue) loop() {
	defer close(s.done)
	for {
		s.mu.Lock()
		calls, closed := s.queue, s.closed
		s.queue = nil
		s.mu.Unlock()
		for _, call := range calls {
			call()
		}
		if len(calls) == 0 {
			if closed {
				return
			}
			<-s.wake
		}
	}
}
