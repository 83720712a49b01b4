package redisstore_test

import (
	"context"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// stallingProxy forwards connections to Redis until stall is set; then it
// accepts new ones and never answers them (a server whose new connections
// hang). Closing kill ends the connections it forwards.
func stallingProxy(t *testing.T, stall *atomic.Bool, kill chan struct{}) string {
	t.Helper()
	opt, err := redis.ParseURL(testenv.RedisURL())
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if stall.Load() {
				go func() { _, _ = io.Copy(io.Discard, c) }()
				t.Cleanup(func() { _ = c.Close() })
				continue
			}
			go func() {
				u, err := net.Dial("tcp", opt.Addr)
				if err != nil {
					_ = c.Close()
					return
				}
				go func() { <-kill; _ = c.Close(); _ = u.Close() }()
				go func() { _, _ = io.Copy(u, c) }()
				_, _ = io.Copy(c, u)
			}()
		}
	}()
	return ln.Addr().String()
}

// TestListenerCloseIsBoundedWhileItsConnectionIsMadeAgain: a Listener whose
// subscription connection broke and is being made again, to a server whose
// new connections hang, closes within a second and a little, and its
// goroutines end with the client's read timeout.
func TestListenerCloseIsBoundedWhileItsConnectionIsMadeAgain(t *testing.T) {
	testenv.Short(t)
	var stall atomic.Bool
	kill := make(chan struct{})
	baseline := runtime.NumGoroutine()
	client := redis.NewClient(&redis.Options{Addr: stallingProxy(t, &stall, kill),
		ContextTimeoutEnabled: true, ReadTimeout: 2 * time.Second, DialTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = client.Close() })
	st, err := redisstore.New(client, nil)
	require.NoError(t, err)
	notified := make(chan string, 16)
	l, err := st.Listen(context.Background(), func(key string) {
		select {
		case notified <- key:
		default:
		}
	})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	key := "jobonce-test-close-" + testenv.RandomID(4)
	require.NoError(t, l.Add(ctx, key))
	select {
	case k := <-notified:
		require.Equal(t, key, k)
	case <-ctx.Done():
		t.Fatal("the subscription was not confirmed")
	}

	stall.Store(true)
	close(kill) // the reader makes its connection again, and it hangs
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	_ = l.Close()
	require.Less(t, time.Since(start), 1500*time.Millisecond, "Close waited for the connection being made")
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > baseline+4 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	require.LessOrEqual(t, runtime.NumGoroutine(), baseline+4, "the Listener's goroutines outlived the client's timeouts")
}
