package redisstore_test

import (
	"context"
	"slices"
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

// A slot moved as redis-cli --cluster reshard moves it, while the Store
// waits for a replica on a Cluster: its primary answers ASK for a key it
// has handed over while the slot migrates, and MOVED once it is done. Each
// write follows the redirect, and the wait that judges it runs on the node
// that did it.
func TestClusterWaitFollowsASlotMigration(t *testing.T) {
	cluster := testenv.StartRedisCluster(t, 3, 1)
	ctx := context.Background()
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
	t.Cleanup(func() { _ = client.Close() })
	require.Eventually(t, func() bool { return client.Ping(ctx).Err() == nil }, 10*time.Second, 50*time.Millisecond)
	s, err := redisstore.New(client, &redisstore.Config{Logger: quiet, WaitReplicas: 1, WaitTimeout: 2 * time.Second})
	require.NoError(t, err)

	// begin starts moving key's slot to another primary.
	begin := func(t *testing.T, key string) *testenv.SlotMigration {
		slot := cluster.KeySlot(t, key)
		owner := cluster.SlotOwner(t, slot)
		for _, p := range cluster.Primaries(t) {
			if p != owner {
				return cluster.BeginSlotMigration(t, slot, p)
			}
		}
		t.Fatal("no other primary")
		return nil
	}
	// finish ends the migration; the Cluster client's slot map still names
	// the old owner, so the next call meets MOVED.
	finish := func(t *testing.T, m *testenv.SlotMigration, key string) {
		m.Finish(t)
		owner, err := client.MasterForKey(ctx, key)
		require.NoError(t, err)
		require.Equal(t, m.From.Addr, owner.Options().Addr, "the client's slot map is stale")
	}
	// onReplica requires key on a replica of m.To (SCAN is served whatever
	// slots the node serves).
	onReplica := func(t *testing.T, m *testenv.SlotMigration, key string) {
		replicas := cluster.ReplicasOf(t, m.To)
		require.NotEmpty(t, replicas)
		found := false
		for _, r := range replicas {
			keys, _, err := r.Client().Scan(ctx, 0, "*", 1<<20).Result() // keys may hold glob characters
			require.NoError(t, err)
			found = found || slices.Contains(keys, key)
		}
		require.True(t, found, "the write was acknowledged by a replica of the node that did it, %s", m.To.Addr)
	}

	t.Run("AMarkerMeetsASKThenItsDuplicateMeetsMOVED", func(t *testing.T) {
		g, err := core.New(s, &core.Config{Logger: quiet, KeyPrefix: testenv.Prefix(t), StoreTimeout: time.Second})
		require.NoError(t, err)
		key, err := g.StoredKey("job")
		require.NoError(t, err)
		var m *testenv.SlotMigration
		runs := 0
		out, err := g.Do(ctx, "job", func(context.Context) error {
			runs++
			m = begin(t, key)
			require.Equal(t, 1, m.MoveKeys(t), "the claim moved to the importing primary")
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, core.Ran, out, "the marker was written where the key is now, and acknowledged")
		v, _ := readAsking(t, m.To, key)
		require.True(t, strings.HasPrefix(v, "w"), "a done marker on %s, not %q", m.To.Addr, v)
		onReplica(t, m, key)

		finish(t, m, key)
		out, err = g.Do(ctx, "job", func(context.Context) error { runs++; return nil })
		require.NoError(t, err)
		require.Equal(t, core.Duplicate, out, "the redelivery found the marker on the slot's new owner")
		require.Equal(t, 1, runs)
	})

	t.Run("AClaimMeetsASKThenAnotherMeetsMOVED", func(t *testing.T) {
		prefix := testenv.Prefix(t)
		key := prefix + "claim"
		m := begin(t, key)
		other := prefix + "other"
		for cluster.SlotOwner(t, cluster.KeySlot(t, other)) != m.From || cluster.KeySlot(t, other) == m.Slot {
			other += "x"
		}
		tok := driver.NewToken()
		replies, errs, _ := s.Batch(ctx, nil, []driver.ClaimRequest{
			{Key: key, Token: tok, Lease: time.Minute},
			{Key: other, Token: driver.NewToken(), Lease: time.Minute},
		})
		require.NoError(t, errs[0], "the claim followed ASK to %s", m.To.Addr)
		require.Equal(t, driver.StateClaimed, replies[0].State)
		require.NoError(t, errs[1], "a claim on the migrating slot's owner, in the same batch")
		require.Equal(t, driver.StateClaimed, replies[1].State)
		v, _ := readAsking(t, m.To, key)
		require.True(t, strings.HasPrefix(v, "F"), "a claim on %s, not %q", m.To.Addr, v)
		onReplica(t, m, key)

		finish(t, m, key)
		r, err := s.Claim(ctx, driver.ClaimRequest{Key: key, Token: driver.NewToken(), Lease: time.Minute})
		require.NoError(t, err, "the claim followed MOVED to %s", m.To.Addr)
		require.Equal(t, driver.StateRunning, r.State, "the first claim holds the key on the slot's new owner")
		r, err = s.Claim(ctx, driver.ClaimRequest{Key: key, Token: tok, Lease: time.Minute})
		require.NoError(t, err)
		require.Equal(t, driver.StateClaimed, r.State, "the first claim's request sent again is its own")
		require.Equal(t, replies[0].Fence, r.Fence)
	})

	t.Run("AnExtensionMeetsASKThenMOVED", func(t *testing.T) {
		key := testenv.Prefix(t) + "extend"
		tok := driver.NewToken()
		r, err := s.Claim(ctx, driver.ClaimRequest{Key: key, Token: tok, Lease: 10 * time.Second})
		require.NoError(t, err)
		require.Equal(t, driver.StateClaimed, r.State)
		m := begin(t, key)
		require.Equal(t, 1, m.MoveKeys(t))

		require.NoError(t, s.Extend(ctx, key, tok, time.Minute), "the extension followed ASK to %s", m.To.Addr)
		_, ttl := readAsking(t, m.To, key)
		require.Greater(t, ttl, 30*time.Second, "the lease was renewed on %s", m.To.Addr)
		require.ErrorIs(t, s.Extend(ctx, key, driver.NewToken(), time.Minute), core.ErrLeaseLost,
			"another token's extension is answered by the key's node")

		finish(t, m, key)
		require.NoError(t, s.Extend(ctx, key, tok, 2*time.Minute), "the extension followed MOVED to %s", m.To.Addr)
		ttl, err = m.To.Client().PTTL(ctx, key).Result()
		require.NoError(t, err)
		require.Greater(t, ttl, 90*time.Second, "the lease was renewed on %s", m.To.Addr)
	})
}

// readAsking returns key's value and remaining TTL on s, a primary that may
// be importing key's slot (each read follows ASKING).
func readAsking(t *testing.T, s *testenv.RedisServer, key string) (string, time.Duration) {
	t.Helper()
	ctx := context.Background()
	conn := s.Client().Conn()
	defer conn.Close()
	var get *redis.StringCmd
	var ttl *redis.DurationCmd
	_, err := conn.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Do(ctx, "ASKING")
		get = p.Get(ctx, key)
		p.Do(ctx, "ASKING")
		ttl = p.PTTL(ctx, key)
		return nil
	})
	require.NoError(t, err, "read %s on %s", key, s.Addr)
	return get.Val(), ttl.Val()
}

// killWaits kills, from control, every connection blocked in WAIT on its
// server, as a Sentinel failover does (CLIENT KILL) before WAIT can answer,
// until the returned stop is called; stop returns how many it killed.
func killWaits(t *testing.T, control *redis.Client) (stop func() int32) {
	t.Helper()
	ctx := context.Background()
	quit, done := make(chan struct{}), make(chan struct{})
	var killed atomic.Int32
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			clients, err := control.ClientList(ctx).Result()
			if err != nil {
				continue // a poll that failed
			}
			for line := range strings.Lines(clients) {
				if !strings.Contains(line, " cmd=wait ") {
					continue
				}
				for field := range strings.FieldsSeq(line) {
					if id, ok := strings.CutPrefix(field, "id="); ok && control.Do(ctx, "CLIENT", "KILL", "ID", id).Err() == nil {
						killed.Add(1)
					}
				}
			}
		}
	}()
	var once atomic.Bool
	stop = func() int32 {
		if once.CompareAndSwap(false, true) {
			close(quit)
		}
		<-done
		return killed.Load()
	}
	t.Cleanup(func() { stop() })
	return stop
}

// waitingStore returns a Store on primary that waits for its one replica,
// paused, so that every WAIT blocks until killWaits cuts it, and a Store on
// primary that does not wait.
func waitingStore(t *testing.T) (primary *testenv.RedisServer, waiting, plain *redisstore.Store) {
	t.Helper()
	primary, replicas := testenv.StartRedisReplicas(t, 1)
	caughtUp(t, primary, 1)
	waiting, err := redisstore.New(otherClient(t, primary), &redisstore.Config{Logger: quiet, WaitReplicas: 1, WaitTimeout: 20 * time.Second})
	require.NoError(t, err)
	replicas[0].Pause()
	return primary, waiting, newStore(t, otherClient(t, primary))
}

// A claim whose WAIT a failover cuts (the connection killed before WAIT
// answers, on every attempt go-redis makes) was written but not
// acknowledged: it is released and answered ErrUnreplicated, not the
// connection's EOF, so a Guard with FailOpen does not run the job
// unguarded; it is Unavailable.
func TestClaimWhoseWaitIsCutIsUnreplicated(t *testing.T) {
	primary, waiting, plain := waitingStore(t)
	g, err := core.New(waiting, &core.Config{Logger: quiet, FailOpen: true, StoreTimeout: 30 * time.Second})
	require.NoError(t, err)
	stop := killWaits(t, primary.Client())
	ran := false
	out, err := g.Do(context.Background(), "k", func(context.Context) error { ran = true; return nil })
	require.Positive(t, stop(), "a WAIT was cut")
	require.False(t, ran, "the job never runs unguarded on a claim that may be held")
	require.Equal(t, core.Unavailable, out)
	require.ErrorIs(t, err, core.ErrStoreUnavailable)
	require.ErrorIs(t, err, core.ErrUnreplicated)

	key, err := g.StoredKey("k")
	require.NoError(t, err)
	r, err := plain.Claim(context.Background(), driver.ClaimRequest{Key: key, Token: driver.NewToken(), Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, driver.StateClaimed, r.State, "the claim was released")
}

// A done marker whose WAIT a failover cuts was written but not
// acknowledged: it is answered ErrUnreplicated (the Guard sends it again),
// alone and in a batch with a claim, which is answered so too.
func TestMarkerWhoseWaitIsCutIsUnreplicated(t *testing.T) {
	primary, waiting, plain := waitingStore(t)
	ctx := context.Background()
	held := driver.ClaimRequest{Key: "held", Token: driver.NewToken(), Lease: time.Minute}
	_, err := plain.Claim(ctx, held)
	require.NoError(t, err)
	held2 := driver.ClaimRequest{Key: "held2", Token: driver.NewToken(), Lease: time.Minute}
	_, err = plain.Claim(ctx, held2)
	require.NoError(t, err)

	stop := killWaits(t, primary.Client())
	err = waiting.Complete(ctx, driver.CompleteRequest{Key: held.Key, Token: held.Token, Result: []byte("r"), Retention: time.Minute})
	require.ErrorIs(t, err, core.ErrUnreplicated)
	_, claimErrs, completeErrs := waiting.Batch(ctx,
		[]driver.CompleteRequest{{Key: held2.Key, Token: held2.Token, Retention: time.Minute}},
		[]driver.ClaimRequest{{Key: "free", Token: driver.NewToken(), Lease: time.Minute}})
	require.Positive(t, stop(), "a WAIT was cut")
	require.ErrorIs(t, completeErrs[0], core.ErrUnreplicated)
	require.ErrorIs(t, claimErrs[0], core.ErrUnreplicated)

	for _, key := range []string{held.Key, held2.Key} {
		r, err := plain.Claim(ctx, driver.ClaimRequest{Key: key, Token: driver.NewToken(), Lease: time.Minute})
		require.NoError(t, err)
		require.Equal(t, driver.StateDone, r.State, "the marker is written on the primary")
	}
}

// With WaitReplicas, a Redis that cannot be reached at all (every dial
// refused) wrote nothing: the claim's error is the dial's, and a Guard with
// FailOpen runs the job unguarded, as without the wait.
func TestWaitingStoreThatCannotBeReachedFailsOpen(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: testenv.ClosedAddr(t), MaxRetries: -1, DialerRetries: 1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = client.Close() })
	s, err := redisstore.New(client, &redisstore.Config{Logger: quiet, SkipEvictionCheck: true, WaitReplicas: 1})
	require.NoError(t, err)
	_, err = s.Claim(context.Background(), driver.ClaimRequest{Key: "k", Token: driver.NewToken(), Lease: time.Minute})
	require.Error(t, err)
	require.NotErrorIs(t, err, core.ErrUnreplicated, "nothing was written")

	g, err := core.New(s, &core.Config{Logger: quiet, FailOpen: true})
	require.NoError(t, err)
	ran := false
	out, err := g.Do(context.Background(), "k", func(context.Context) error { ran = true; return nil })
	require.NoError(t, err)
	require.Equal(t, core.Unguarded, out)
	require.True(t, ran)
}

// noScriptFirst is a go-redis hook that answers the first command of the
// next pipeline with NOSCRIPT without sending it, as a server that has the
// claim script in its cache but not the complete script does (after a
// restart or a failover, a single Claim's EVAL has loaded the one, no
// Complete has loaded the other yet).
type noScriptFirst struct {
	arm      atomic.Bool
	noScript error
}

func (h *noScriptFirst) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *noScriptFirst) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}

func (h *noScriptFirst) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) < 2 || !h.arm.CompareAndSwap(true, false) {
			return next(ctx, cmds)
		}
		err := next(ctx, cmds[1:])
		cmds[0].SetErr(h.noScript)
		return err
	}
}

// When the complete script is missing from the server's cache (NOSCRIPT)
// and the claim script is not, the complete runs again on its own after
// the pipeline, so a claim of the same key in the batch runs first: it
// finds the key running rather than done, and is retried later; nothing is
// claimed twice and the marker is written.
func TestNoScriptInABatchClaimsNothingTwice(t *testing.T) {
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	noScript := rdb.EvalSha(ctx, "0000000000000000000000000000000000000000", nil).Err()
	require.True(t, redis.HasErrorPrefix(noScript, "NOSCRIPT"), "a NOSCRIPT error to replay: %v", noScript)

	hook := &noScriptFirst{noScript: noScript}
	rdb.AddHook(hook)
	s, err := redisstore.New(rdb, &redisstore.Config{Logger: quiet, SkipEvictionCheck: true})
	require.NoError(t, err)

	key := prefix + "k"
	first := driver.ClaimRequest{Key: key, Token: driver.NewToken(), Lease: time.Minute}
	r, err := s.Claim(ctx, first) // loads the claim script
	require.NoError(t, err)
	require.Equal(t, driver.StateClaimed, r.State)

	hook.arm.Store(true)
	replies, claimErrs, completeErrs := s.Batch(ctx,
		[]driver.CompleteRequest{{Key: key, Token: first.Token, Result: []byte("r"), Retention: time.Minute}},
		[]driver.ClaimRequest{{Key: key, Token: driver.NewToken(), Lease: time.Minute}})
	require.False(t, hook.arm.Load(), "the hook answered the pipeline's first command")
	require.NoError(t, completeErrs[0], "the marker is written, after NOSCRIPT, on its own")
	require.NoError(t, claimErrs[0])
	require.Contains(t, []driver.State{driver.StateRunning, driver.StateDone}, replies[0].State, "the key is held, then done: never claimed twice")
	r, err = s.Claim(ctx, driver.ClaimRequest{Key: key, Token: driver.NewToken(), Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, driver.StateDone, r.State, "the marker was written")
}
