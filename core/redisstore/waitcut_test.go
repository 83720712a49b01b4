package redisstore_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// A claim whose WAIT is cut by a partition (the worker's connections to the
// primary close, and its next dial is refused) was written on the primary,
// which keeps it. go-redis sends the pipeline again, the dial fails, and the
// dial's error is all the store sees: with a client that retries, it is
// still an unacknowledged write (ErrUnreplicated), so a Guard with FailOpen
// does not run the job unguarded beside a claim the primary holds.
func TestClaimWhoseWaitIsCutAndRedialRefusedIsNotRunUnguarded(t *testing.T) {
	primary, replicas := testenv.StartRedisReplicas(t, 1)
	caughtUp(t, primary, 1)
	proxy := testenv.StartProxy(t, "127.0.0.1:0", primary.Client().Options().Addr)
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr()}) // go-redis's default: 3 retries
	t.Cleanup(func() { _ = client.Close() })
	waiting, err := redisstore.New(client, &redisstore.Config{Logger: quiet, WaitReplicas: 1, WaitTimeout: 20 * time.Second})
	require.NoError(t, err)
	g, err := core.New(waiting, &core.Config{Logger: quiet, FailOpen: true, StoreTimeout: 30 * time.Second})
	require.NoError(t, err)

	// Load the scripts while the replica acknowledges, then pause it.
	_, err = g.Do(context.Background(), "warm-up", func(context.Context) error { return nil })
	require.NoError(t, err)
	caughtUp(t, primary, 1)
	replicas[0].Pause()
	t.Cleanup(replicas[0].Resume)
	control := otherClient(t, primary)
	key, err := g.StoredKey("k")
	require.NoError(t, err)
	var cut atomic.Bool
	done := make(chan struct{})
	defer close(done)
	go func() {
		for range 10000 { // a poll, bounded
			select {
			case <-done:
				return
			default:
			}
			list, err := control.ClientList(context.Background()).Result()
			if err == nil && strings.Contains(list, " cmd=wait ") && control.Exists(context.Background(), key).Val() == 1 {
				cut.Store(true)
				proxy.Cut()
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	ran := false
	out, err := g.Do(context.Background(), "k", func(context.Context) error { ran = true; return nil })
	require.True(t, cut.Load(), "the WAIT was cut")
	require.False(t, ran, "FailOpen ran the job unguarded although its claim was written on a primary that still holds it")
	require.Equal(t, core.Unavailable, out)
	require.ErrorIs(t, err, core.ErrUnreplicated)

	// The unacknowledged claim was released on the primary, or is held
	// there: never free while a copy runs.
	r, err := newStore(t, otherClient(t, primary)).Claim(context.Background(), driver.ClaimRequest{Key: key, Token: driver.NewToken(), Lease: time.Minute})
	require.NoError(t, err)
	require.Contains(t, []driver.State{driver.StateClaimed, driver.StateRunning}, r.State)
}

// With WaitReplicas, the claim script runs and then WAIT blocks up to
// WaitTimeout in the same pipeline. When the caller's context ends meanwhile
// (the client set up with ContextTimeoutEnabled, as the README asks), the
// claim is answered the context's error, and the claim granted on the
// server is released, as Batch's doc says of claims granted but not
// acknowledged: the next copy claims the key at once rather than being
// answered Running for the whole lease.
func TestClaimCutDuringWaitIsReleased(t *testing.T) {
	prefix := testenv.Prefix(t)
	client := testenv.Redis(t, prefix)
	opt := *client.Options()
	opt.ContextTimeoutEnabled = true
	cc := redis.NewClient(&opt)
	t.Cleanup(func() { _ = cc.Close() })
	s, err := redisstore.New(cc, &redisstore.Config{Logger: quiet, WaitReplicas: 1, WaitTimeout: 2 * time.Second})
	require.NoError(t, err)
	plain := newStore(t, client)

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	key := prefix + "cut"
	_, err = s.Claim(ctx, driver.ClaimRequest{Key: key, Token: driver.NewToken(), Lease: time.Minute})
	require.Error(t, err)

	r, err := plain.Claim(context.Background(), driver.ClaimRequest{Key: key, Token: driver.NewToken(), Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, driver.StateClaimed, r.State,
		"a claim answered with an error must not stay held for its lease (%s left)", r.Remaining)
}
