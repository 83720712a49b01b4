package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/core/storetest"
	"github.com/jobonce/jobonce/internal/testenv"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newStore(t testing.TB, client redis.UniversalClient) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(client, &redisstore.Config{Logger: quiet})
	require.NoError(t, err)
	return s
}

// prefixedStore returns a key prefix of the test's own, whose keys are
// deleted at cleanup, a client, and a Store on the client.
func prefixedStore(t *testing.T) (string, *redis.Client, *redisstore.Store) {
	t.Helper()
	prefix := testenv.Prefix(t)
	client := testenv.Redis(t, prefix)
	return prefix, client, newStore(t, client)
}

func TestConformance(t *testing.T) {
	client := testenv.Redis(t, "jobonce-storetest:")
	storetest.Run(t, func(t *testing.T) driver.Store { return newStore(t, client) })
}

func TestDeadConnectionLosesLeaseAndLaterCopyRuns(t *testing.T) {
	prefix := testenv.Prefix(t)
	direct := testenv.Redis(t, prefix)
	p := testenv.StartProxy(t, "127.0.0.1:0", direct.Options().Addr)
	viaProxy := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = viaProxy.Close() })

	const lease = 300 * time.Millisecond
	cfg := core.Config{Lease: lease, KeyPrefix: prefix, Logger: quiet}
	doomed, err := core.New(newStore(t, viaProxy), &cfg)
	require.NoError(t, err)
	healthy, err := core.New(newStore(t, direct), &cfg)
	require.NoError(t, err)

	ctx := context.Background()
	started := make(chan struct{})
	var cause error
	done := make(chan core.Outcome, 1)
	go func() {
		out, _ := doomed.Do(ctx, "job", func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			cause = context.Cause(ctx)
			return cause
		})
		done <- out
	}()
	<-started
	p.Cut()
	select {
	case out := <-done:
		require.Equal(t, core.Failed, out)
		require.ErrorIs(t, cause, core.ErrLeaseLost, "the job's context is cancelled with cause ErrLeaseLost")
	case <-time.After(10 * time.Second):
		t.Fatal("the job was not cancelled after its connection died")
	}
	ran := 0
	require.Eventually(t, func() bool {
		out, _ := healthy.Do(ctx, "job", func(context.Context) error { ran++; return nil })
		return out == core.Ran
	}, 10*time.Second, 20*time.Millisecond, "a later copy runs: nothing is lost")
	require.Equal(t, 1, ran)
}

func TestClosedPortFailsClosedOrOpen(t *testing.T) {
	testenv.Short(t)
	client := redis.NewClient(&redis.Options{Addr: testenv.ClosedAddr(t), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = client.Close() })
	store := newStore(t, client)

	closed, err := core.New(store, &core.Config{Logger: quiet})
	require.NoError(t, err)
	ran := false
	out, err := closed.Do(context.Background(), "k", func(context.Context) error { ran = true; return nil })
	require.Equal(t, core.Unavailable, out)
	require.ErrorIs(t, err, core.ErrStoreUnavailable)
	require.False(t, ran)

	open, err := core.New(store, &core.Config{Logger: quiet, FailOpen: true})
	require.NoError(t, err)
	out, err = open.Do(context.Background(), "k", func(context.Context) error { ran = true; return nil })
	require.NoError(t, err)
	require.Equal(t, core.Unguarded, out)
	require.True(t, ran)
}

func TestEvictionCheck(t *testing.T) {
	client := testenv.Redis(t, "")
	store := newStore(t, client)
	policy, err := store.CheckEviction(context.Background())
	require.NoError(t, err)
	require.NotEmpty(t, policy)
	_, err = redisstore.New(nil, nil)
	require.ErrorContains(t, err, "nil")
}

func TestForeignValueIsAnError(t *testing.T) {
	prefix := testenv.Prefix(t)
	client := testenv.Redis(t, prefix)
	require.NoError(t, client.Set(context.Background(), prefix+"foreign", "hello", time.Minute).Err())
	g, err := core.New(newStore(t, client), &core.Config{KeyPrefix: prefix, Logger: quiet, PlainKeys: true})
	require.NoError(t, err)
	out, err := g.Do(context.Background(), "foreign", func(context.Context) error { return errors.New("must not run") })
	require.Equal(t, core.Unavailable, out)
	require.ErrorContains(t, err, "did not write")
}

// TestPoolTimeoutIsUnreachable: a claim that finds every connection of the
// client's pool busy past PoolTimeout fails with driver.ErrUnreachable, so
// a Guard with FailOpen runs the job unguarded, as for any store it cannot
// reach.
func TestPoolTimeoutIsUnreachable(t *testing.T) {
	ctx := context.Background()
	prefix := testenv.Prefix(t)
	control := testenv.Redis(t, prefix)
	opt, err := redis.ParseURL(testenv.RedisURL())
	require.NoError(t, err)
	opt.PoolSize, opt.PoolTimeout, opt.MaxRetries = 1, 100*time.Millisecond, -1
	opt.ClientName = "jobonce-test-pool-" + testenv.RandomID(4)
	client := redis.NewClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	s := newStore(t, client)

	// The pool's only connection waits on a list nobody pushes to yet.
	list := prefix + "list"
	blocked := make(chan error, 1)
	go func() { blocked <- client.BLPop(ctx, 30*time.Second, list).Err() }()
	t.Cleanup(func() {
		control.LPush(context.Background(), list, "go")
		require.NoError(t, <-blocked)
	})
	require.Eventually(t, func() bool {
		clients, _ := control.ClientList(ctx).Result() // an error is a poll that failed
		for line := range strings.Lines(clients) {
			if strings.Contains(line, "name="+opt.ClientName+" ") && strings.Contains(line, "cmd=blpop") {
				return true
			}
		}
		return false
	}, 5*time.Second, 5*time.Millisecond, "BLPOP holds the connection")

	_, err = s.Claim(ctx, driver.ClaimRequest{Key: prefix + "k", Token: driver.NewToken(), Lease: time.Minute})
	require.ErrorIs(t, err, redis.ErrPoolTimeout)
	require.ErrorIs(t, err, driver.ErrUnreachable)

	g, err := core.New(s, &core.Config{Logger: quiet, FailOpen: true, KeyPrefix: prefix})
	require.NoError(t, err)
	ran := false
	out, err := g.Do(ctx, "k", func(context.Context) error { ran = true; return nil })
	require.NoError(t, err)
	require.Equal(t, core.Unguarded, out)
	require.True(t, ran)
}

// A done marker whose reply the network lost is sent again by go-redis on a
// new connection: the script finds the marker its own claim wrote and
// answers it written, so the job reports Ran, with no warning, and its
// redelivery is a Duplicate with the stored result. Alone and in a batch.
func TestMarkerWhoseReplyWasLostIsRan(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(fmt.Sprint("batched=", batched), func(t *testing.T) {
			prefix := testenv.Prefix(t)
			direct := testenv.Redis(t, prefix)
			p := testenv.StartProxy(t, "127.0.0.1:0", direct.Options().Addr)
			viaProxy := redis.NewClient(&redis.Options{Addr: p.Addr()})
			t.Cleanup(func() { _ = viaProxy.Close() })
			var store driver.Store = newStore(t, viaProxy)
			if !batched {
				store = struct{ driver.Store }{store}
			}
			var warned testenv.Warnings
			g, err := core.New(store, &core.Config{KeyPrefix: prefix, Logger: warned.Logger()})
			require.NoError(t, err)

			ctx := context.Background()
			result := []byte("the result whose marker's reply is lost")
			p.DropReplyOnce(result) // only the marker carries the result
			res, err := g.Run(ctx, core.Job{Key: "job"}, func(context.Context) ([]byte, error) { return result, nil })
			require.NoError(t, err)
			require.Equal(t, core.Ran, res.Outcome, "the marker was written once and is durable")
			require.Empty(t, warned.Messages())
			require.True(t, p.ReplyDropped(), "the marker's reply was lost")

			res, err = g.Run(ctx, core.Job{Key: "job"}, func(context.Context) ([]byte, error) { return nil, errors.New("must not run") })
			require.NoError(t, err)
			require.Equal(t, core.Duplicate, res.Outcome)
			require.Equal(t, result, res.Value)
		})
	}
}
