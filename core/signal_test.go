package core_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/memstore"
)

// hangingNotifier is a memstore whose Listener calls named in hang wait for
// their context to end (a subscription connection that cannot be made), and
// which counts the Listeners it opened and closed.
type hangingNotifier struct {
	*memstore.Store
	hang           map[string]bool // "Listen", "Add", "Remove"
	opened, closed atomic.Int32
}

func (s *hangingNotifier) Listen(ctx context.Context, notify func(string)) (driver.Listener, error) {
	if s.hang["Listen"] {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	l, err := s.Store.Listen(ctx, notify)
	if err != nil {
		return nil, err
	}
	s.opened.Add(1)
	return &hangingListener{Listener: l, s: s}, nil
}

type hangingListener struct {
	driver.Listener
	s *hangingNotifier
}

func (l *hangingListener) Add(ctx context.Context, key string) error {
	if l.s.hang["Add"] {
		<-ctx.Done()
		return ctx.Err()
	}
	return l.Listener.Add(ctx, key)
}

func (l *hangingListener) Remove(ctx context.Context, key string) error {
	if l.s.hang["Remove"] {
		<-ctx.Done()
		return ctx.Err()
	}
	return l.Listener.Remove(ctx, key)
}

func (l *hangingListener) Close() error {
	l.s.closed.Add(1)
	return l.Listener.Close()
}

// TestWaitersAreAnsweredWithinTheirContextWhileTheListenerHangs: eight
// copies that find their jobs running wait with 100 ms contexts while the
// Listener's calls hang for their whole StoreTimeout (500 ms): each is
// answered with its context's error within its context and one
// StoreTimeout, not one after another, and once all have left the Listener
// is closed and no goroutine is left.
func TestWaitersAreAnsweredWithinTheirContextWhileTheListenerHangs(t *testing.T) {
	const (
		n       = 8
		within  = 100 * time.Millisecond
		timeout = 500 * time.Millisecond
		slack   = 300 * time.Millisecond
	)
	for _, hang := range [][]string{{"Add"}, {"Listen"}, {"Add", "Remove"}} {
		t.Run(fmt.Sprint(hang), func(t *testing.T) {
			baseline := runtime.NumGoroutine()
			st := &hangingNotifier{Store: memstore.New(), hang: map[string]bool{}}
			for _, h := range hang {
				st.hang[h] = true
			}
			g, err := core.New(st, &core.Config{StoreTimeout: timeout, WaitingShare: 1})
			require.NoError(t, err)

			release := make(chan struct{})
			var holders sync.WaitGroup
			for i := range n {
				started := make(chan struct{})
				holders.Go(func() {
					_, _ = g.Run(context.Background(), core.Job{Key: fmt.Sprint("k", i)}, func(context.Context) ([]byte, error) {
						close(started)
						<-release
						return nil, nil
					})
				})
				<-started
			}

			took := make([]time.Duration, n)
			errs := make([]error, n)
			var waiters sync.WaitGroup
			for i := range n {
				waiters.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), within)
					defer cancel()
					start := time.Now()
					_, errs[i] = g.Run(ctx, core.Job{Key: fmt.Sprint("k", i), WaitUntil: time.Now().Add(20 * time.Second)},
						func(context.Context) ([]byte, error) { return nil, nil })
					took[i] = time.Since(start)
				})
			}
			waiters.Wait()
			close(release)
			holders.Wait()

			for i := range n {
				require.ErrorIs(t, errs[i], context.DeadlineExceeded, "waiter %d", i)
				require.Less(t, took[i], within+timeout+slack, "waiter %d answered after %v (all: %v)", i, took[i], took)
			}
			require.Equal(t, st.opened.Load(), st.closed.Load(), "every Listener opened is closed once nobody waits")
			deadline := time.Now().Add(5 * time.Second)
			for runtime.NumGoroutine() > baseline && time.Now().Before(deadline) {
				runtime.Gosched()
				time.Sleep(10 * time.Millisecond)
			}
			require.LessOrEqual(t, runtime.NumGoroutine(), baseline, "goroutines left after the waits")
		})
	}
}

// TestLastWaiterToLeaveClosesTheListener: copies waiting on several keys
// share one Listener, and it is closed when the last of them leaves, also
// when the copies leave together.
func TestLastWaiterToLeaveClosesTheListener(t *testing.T) {
	st := &hangingNotifier{Store: memstore.New(), hang: map[string]bool{}}
	g, err := core.New(st, &core.Config{StoreTimeout: time.Second})
	require.NoError(t, err)
	const n = 6
	release := make(chan struct{})
	var holders sync.WaitGroup
	for i := range n {
		started := make(chan struct{})
		holders.Go(func() {
			_, _ = g.Run(context.Background(), core.Job{Key: fmt.Sprint("k", i%3)}, func(context.Context) ([]byte, error) {
				close(started)
				<-release
				return nil, nil
			})
		})
		if i < 3 {
			<-started
		}
	}
	var waiters sync.WaitGroup
	results := make([]core.Result, n)
	for i := range n {
		waiters.Go(func() {
			results[i], _ = g.Run(context.Background(), core.Job{Key: fmt.Sprint("k", i%3), WaitUntil: time.Now().Add(10 * time.Second)},
				func(context.Context) ([]byte, error) { return nil, nil })
		})
	}
	close(release)
	holders.Wait()
	waiters.Wait()
	require.Positive(t, st.opened.Load(), "the waiting copies listened")
	require.Equal(t, st.opened.Load(), st.closed.Load(), "the last copy to leave closed the Listener")
}
