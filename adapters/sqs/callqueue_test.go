package sqsonce

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The callQueue runs calls in the order they were queued, one at a time; push
// never waits for a call, and close waits for all of them.
func TestCallQueueRunsCallsInOrder(t *testing.T) {
	t.Parallel()
	s := startCallQueue()
	gate := make(chan struct{})
	var mu sync.Mutex
	var order []int
	s.push(func() { <-gate })
	for i := range 100 {
		s.push(func() {
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
		})
	}
	mu.Lock()
	require.Empty(t, order, "a call ran while an earlier one was in flight")
	mu.Unlock()
	closed := make(chan struct{})
	go func() {
		s.close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("close returned with calls queued")
	case <-time.After(50 * time.Millisecond):
	}
	close(gate)
	<-closed
	want := make([]int, 100)
	for i := range want {
		want[i] = i
	}
	require.Equal(t, want, order)
}
