// Package watermilltest holds what the Watermill adapter's tests and the
// broker-backed tests of adapters/watermill/backends (a module of its own,
// so that the brokers' clients stay out of this module) share: a router run
// for the length of a test, a subscription that collects what it receives,
// publishers that count or fail, a handler that blocks, a keyed Config and
// new messages.
package watermilltest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	watermillonce "github.com/jobonce/jobonce/adapters/watermill"
)

// RunRouter runs router until the end of the test, and returns once it runs.
func RunRouter(t testing.TB, router *message.Router) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- router.Run(ctx) }()
	t.Cleanup(func() {
		require.NoError(t, router.Close())
		cancel()
		require.NoError(t, <-done)
	})
	select {
	case <-router.Running():
	case err := <-done:
		t.Fatalf("the router stopped: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the router did not start")
	}
}

// Publish publishes msgs to topic, failing the test on an error.
func Publish(t *testing.T, pub message.Publisher, topic string, msgs ...*message.Message) {
	t.Helper()
	require.NoError(t, pub.Publish(topic, msgs...))
}

// Received collects the messages a subscription delivers, acknowledging
// each.
type Received struct {
	mu   sync.Mutex
	msgs []*message.Message
	got  chan struct{}
}

// Subscribe reads topic through sub until the end of the test.
func Subscribe(t *testing.T, sub message.Subscriber, topic string) *Received {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := sub.Subscribe(ctx, topic)
	require.NoError(t, err)
	r := &Received{got: make(chan struct{}, 100)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range ch {
			r.mu.Lock()
			r.msgs = append(r.msgs, m)
			r.mu.Unlock()
			m.Ack()
			r.got <- struct{}{}
		}
	}()
	t.Cleanup(func() {
		cancel() // ends the subscription and closes ch
		<-done
		_ = sub.Close()
	})
	return r
}

// Wait waits for n messages in all and returns them.
func (r *Received) Wait(t *testing.T, n int) []*message.Message {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		r.mu.Lock()
		msgs := append([]*message.Message(nil), r.msgs...)
		r.mu.Unlock()
		if len(msgs) >= n {
			return msgs
		}
		select {
		case <-r.got:
		case <-timeout:
			t.Fatalf("%d of %d messages received in time", len(msgs), n)
		}
	}
}

// Count returns how many messages arrived so far.
func (r *Received) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs)
}

// CountingPublisher passes every Publish to a real publisher and counts the
// messages it passed.
type CountingPublisher struct {
	message.Publisher
	Calls, Msgs atomic.Int64
}

func (p *CountingPublisher) Publish(topic string, msgs ...*message.Message) error {
	p.Calls.Add(1)
	p.Msgs.Add(int64(len(msgs)))
	return p.Publisher.Publish(topic, msgs...)
}

// NewMessage returns a message with a new UUID.
func NewMessage(payload string) *message.Message {
	return message.NewMessage(watermill.NewUUID(), message.Payload(payload))
}

// Blocking returns a handler whose first run signals started and blocks
// until release is closed (or its context ends), and which counts its runs.
func Blocking(runs *atomic.Int64, started chan<- struct{}, release <-chan struct{}) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		if runs.Add(1) == 1 {
			close(started)
			select {
			case <-release:
			case <-msg.Context().Done():
				return nil, msg.Context().Err()
			}
		}
		return []*message.Message{NewMessage("out")}, nil
	}
}

// KeyByID keys messages by their "id" metadata and skips those marked "free".
var KeyByID = &watermillonce.Config{
	Key:       func(m *message.Message) string { return m.Metadata.Get("id") },
	Unguarded: func(m *message.Message) bool { return m.Metadata.Get("free") == "1" },
}

// FlakyPublisher fails its first Fails calls with Err, then passes every
// Publish to a real publisher and counts the messages it published.
type FlakyPublisher struct {
	message.Publisher
	Err       error
	Fails     atomic.Int64
	Published atomic.Int64
}

func (p *FlakyPublisher) Publish(topic string, msgs ...*message.Message) error {
	if p.Fails.Add(-1) >= 0 {
		return p.Err
	}
	p.Published.Add(int64(len(msgs)))
	return p.Publisher.Publish(topic, msgs...)
}
