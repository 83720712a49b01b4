package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/redisops"
	"github.com/jobonce/jobonce/internal/testenv"
)

// unacknowledged returns a Store on the test Redis, which has no replica,
// that wants one replica's acknowledgement: every write goes unacknowledged.
func unacknowledged(t *testing.T) (string, *redisstore.Store) {
	t.Helper()
	prefix := testenv.Prefix(t)
	client := testenv.Redis(t, prefix)
	s, err := redisstore.New(client, &redisstore.Config{Logger: quiet, WaitReplicas: 1, WaitTimeout: 20 * time.Millisecond})
	require.NoError(t, err)
	return prefix, s
}

// A claim no replica acknowledged is released and answered ErrUnreplicated;
// a done marker so answered is written; an extension is answered so too.
func TestUnacknowledgedWrites(t *testing.T) {
	ctx := context.Background()
	prefix, s := unacknowledged(t)
	plain := newStore(t, testenv.Redis(t, prefix))

	req := driver.ClaimRequest{Key: prefix + "claim", Token: driver.NewToken(), Lease: time.Minute}
	_, err := s.Claim(ctx, req)
	require.ErrorIs(t, err, core.ErrUnreplicated)
	r, err := plain.Claim(ctx, driver.ClaimRequest{Key: req.Key, Token: driver.NewToken(), Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, driver.StateClaimed, r.State, "the unacknowledged claim was released")

	held := driver.ClaimRequest{Key: prefix + "held", Token: driver.NewToken(), Lease: time.Minute}
	_, err = plain.Claim(ctx, held)
	require.NoError(t, err)
	require.ErrorIs(t, s.Extend(ctx, held.Key, held.Token, time.Minute), core.ErrUnreplicated)
	err = s.Complete(ctx, driver.CompleteRequest{Key: held.Key, Token: held.Token, Result: []byte("r"), Retention: time.Minute})
	require.ErrorIs(t, err, core.ErrUnreplicated)
	require.NotErrorIs(t, err, core.ErrLeaseLost)
	r, err = plain.Claim(ctx, driver.ClaimRequest{Key: held.Key, Token: driver.NewToken(), Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, driver.StateDone, r.State, "the unacknowledged marker is written on the primary")
}

// In a batch, granted claims are released and markers reported, while the
// answers that wrote nothing (running, done) stand.
func TestUnacknowledgedBatch(t *testing.T) {
	ctx := context.Background()
	prefix, s := unacknowledged(t)
	plain := newStore(t, testenv.Redis(t, prefix))
	running := driver.ClaimRequest{Key: prefix + "running", Token: driver.NewToken(), Lease: time.Minute}
	_, err := plain.Claim(ctx, running)
	require.NoError(t, err)
	mine := driver.ClaimRequest{Key: prefix + "mine", Token: driver.NewToken(), Lease: time.Minute}
	_, err = plain.Claim(ctx, mine)
	require.NoError(t, err)

	free := driver.ClaimRequest{Key: prefix + "free", Token: driver.NewToken(), Lease: time.Minute}
	replies, claimErrs, completeErrs := s.Batch(ctx,
		[]driver.CompleteRequest{{Key: mine.Key, Token: mine.Token, Retention: time.Minute}},
		[]driver.ClaimRequest{free, {Key: running.Key, Token: driver.NewToken(), Lease: time.Minute}})
	require.ErrorIs(t, completeErrs[0], core.ErrUnreplicated)
	require.ErrorIs(t, claimErrs[0], core.ErrUnreplicated)
	require.Equal(t, driver.ClaimReply{}, replies[0])
	require.NoError(t, claimErrs[1])
	require.Equal(t, driver.StateRunning, replies[1].State)
	r, err := plain.Claim(ctx, driver.ClaimRequest{Key: free.Key, Token: driver.NewToken(), Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, driver.StateClaimed, r.State, "the unacknowledged claim was released")
}

// Through a Guard: a job whose claim is not acknowledged does not run and
// is Unavailable; one whose marker is not acknowledged is Unrecorded, at
// once, not tried again and reported LeaseLost.
func TestGuardWithUnacknowledgedWrites(t *testing.T) {
	ctx := context.Background()
	prefix, s := unacknowledged(t)
	g, err := core.New(s, &core.Config{KeyPrefix: prefix, StoreTimeout: 2 * time.Second, Logger: quiet})
	require.NoError(t, err)
	ran := false
	out, err := g.Do(ctx, "k", func(context.Context) error { ran = true; return nil })
	require.Equal(t, core.Unavailable, out)
	require.ErrorIs(t, err, core.ErrStoreUnavailable)
	require.ErrorIs(t, err, core.ErrUnreplicated)
	require.False(t, ran)

	// Claims acknowledged, done markers not: the job runs once; its marker
	// is sent again (Again) until StoreTimeout, and the outcome is
	// Unrecorded, not LeaseLost.
	for _, grouped := range []bool{true, false} {
		split := &splitStore{Store: newStore(t, testenv.Redis(t, prefix)), marks: s}
		var bs driver.Store = struct{ driver.Store }{split} // no batches
		if grouped {
			bs = testenv.OneByOne(split)
		}
		g, err := core.New(bs, &core.Config{KeyPrefix: prefix, StoreTimeout: 300 * time.Millisecond, Logger: quiet})
		require.NoError(t, err)
		runs := 0
		key := fmt.Sprint("m-", grouped)
		out, err = g.Do(ctx, key, func(context.Context) error { runs++; return nil })
		require.NoError(t, err, "the effect happened: the delivery is handled")
		require.Equal(t, core.Unrecorded, out)
		require.Equal(t, 1, runs)
		require.Greater(t, split.completes.Load(), int32(1), "an unacknowledged marker is sent again")
		out, err = g.Do(ctx, key, func(context.Context) error { runs++; return nil })
		require.NoError(t, err)
		require.Equal(t, core.Duplicate, out, "the marker is on the primary")
	}
}

// A done marker a lagging replica did not acknowledge is sent again until
// it catches up: the job ends Ran, its marker on the replica.
func TestMarkerAcknowledgedOnceTheReplicaCatchesUp(t *testing.T) {
	primary, replicas := testenv.StartRedisReplicas(t, 1)
	caughtUp(t, primary, 1)
	s, err := redisstore.New(primary.Client(), &redisstore.Config{Logger: quiet, WaitReplicas: 1, WaitTimeout: 50 * time.Millisecond})
	require.NoError(t, err)
	counted := &splitStore{Store: s, marks: s}
	g, err := core.New(struct{ driver.Store }{counted}, &core.Config{StoreTimeout: 10 * time.Second, Logger: quiet})
	require.NoError(t, err)
	ctx := context.Background()
	claims := g.Claim(ctx, core.Job{Key: "lagging"})
	require.True(t, claims[0].Runs(), "the claim was acknowledged")
	_, err = claims[0].Work(ctx, func(context.Context) ([]byte, error) { return []byte("r"), nil })
	require.NoError(t, err)

	replicas[0].Pause()
	finished := make(chan []core.Outcome, 1)
	go func() { finished <- g.Finish(ctx, claims...) }()
	require.Eventually(t, func() bool { return counted.completes.Load() >= 2 }, 10*time.Second, time.Millisecond,
		"the marker went unacknowledged and was sent again")
	replicas[0].Resume()
	require.Equal(t, []core.Outcome{core.Ran}, <-finished)
	key, err := g.StoredKey("lagging")
	require.NoError(t, err)
	r, err := redisops.Inspect(ctx, replicas[0].Client(), key)
	require.NoError(t, err)
	require.Equal(t, driver.StateDone, r.State, "the replica has the marker")
}

// splitStore claims through one store and writes done markers through
// another, counting them.
type splitStore struct {
	*redisstore.Store
	marks     *redisstore.Store
	completes atomic.Int32
}

func (s *splitStore) Complete(ctx context.Context, req driver.CompleteRequest) error {
	s.completes.Add(1)
	return s.marks.Complete(ctx, req)
}

// A copy's marker answered ErrUnreplicated is sent again; if meanwhile the
// key was lost (a failover during the WAIT) and copy B claimed, ran and
// wrote an identical marker, the marker sent again finds B's, not its own:
// A reports LeaseLost, never Ran, and B reports Ran.
func TestMarkerSentAgainNeverTakesAnotherCopysMarker(t *testing.T) {
	ctx := context.Background()
	prefix, waiting := unacknowledged(t)
	client := testenv.Redis(t, prefix)
	plain := newStore(t, client)
	bRan := make(chan core.Result, 1)
	a := &answerAfter{Store: plain, marks: waiting, first: bRan}
	var warned testenv.Warnings
	gA, err := core.New(struct{ driver.Store }{a}, &core.Config{KeyPrefix: prefix, Logger: warned.Logger(), StoreTimeout: 3 * time.Second})
	require.NoError(t, err)
	gB, err := core.New(plain, &core.Config{KeyPrefix: prefix, Logger: quiet})
	require.NoError(t, err)
	key, err := gA.StoredKey("job")
	require.NoError(t, err)
	job := core.Job{Key: "job", Fingerprint: "fp"}
	result := func(context.Context) ([]byte, error) { return []byte("r"), nil }

	go func() {
		// While A waits for its marker's acknowledgement, the key is lost
		// and B claims, runs and records the same job.
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if r, err := redisops.Inspect(ctx, client, key); err == nil && r.State == driver.StateDone {
				break
			}
			time.Sleep(time.Millisecond) // a poll with a deadline
		}
		_ = client.Del(ctx, key).Err()
		res, _ := gB.Run(ctx, job, result)
		bRan <- res
	}()
	resA, err := gA.Run(ctx, job, result)
	require.NoError(t, err, "A's effect happened: its delivery is handled")
	require.Equal(t, core.Ran, a.resB.Outcome, "B ran and recorded the job")
	require.Equal(t, 2, int(a.completes.Load()), "A's marker was sent again")
	require.Equal(t, core.LeaseLost, resA.Outcome, "A's marker is lost; the one that stands is B's")
	require.NotEmpty(t, warned.Messages(), "A's lost lease is warned about")
}

// answerAfter claims through one store and writes the first done marker
// through marks, the next ones through the first store (the failover is
// over), counting them; it hands back the first marker's answer only once
// first gave copy B's outcome, which it keeps in resB.
type answerAfter struct {
	driver.Store
	marks     driver.Store
	first     <-chan core.Result
	resB      core.Result
	completes atomic.Int32
}

func (a *answerAfter) Complete(ctx context.Context, req driver.CompleteRequest) error {
	if a.completes.Add(1) > 1 {
		return a.Store.Complete(ctx, req)
	}
	err := a.marks.Complete(ctx, req)
	a.resB = <-a.first
	return err
}

// otherClient returns a client of its own to server, so that its
// connections carry none of another client's writes.
func otherClient(t *testing.T, server *testenv.RedisServer) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: server.Client().Options().Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// caughtUp waits until the primary's replicas acknowledged a write, so that
// a replica paused next lags from there.
func caughtUp(t *testing.T, primary *testenv.RedisServer, replicas int) {
	t.Helper()
	ctx := context.Background()
	c := otherClient(t, primary)
	require.NoError(t, c.Set(ctx, "caught-up", "1", time.Minute).Err())
	require.Equal(t, int64(replicas), c.Wait(ctx, replicas, 10*time.Second).Val(), "the replicas acknowledge a write")
}

// With WaitReplicas, a claim that finds a done marker no replica has yet
// answers ErrUnreplicated, not Duplicate: a failover could lose the marker,
// and the copy acknowledged as a duplicate would then never run. Once the
// replica has the marker, the claim is a Duplicate.
func TestDoneMarkerNoReplicaHasIsNotADuplicate(t *testing.T) {
	primary, replicas := testenv.StartRedisReplicas(t, 1)
	plain := newStore(t, otherClient(t, primary))
	s, err := redisstore.New(otherClient(t, primary), &redisstore.Config{Logger: quiet, WaitReplicas: 1, WaitTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	ctx := context.Background()
	tok := driver.NewToken()
	_, err = plain.Claim(ctx, driver.ClaimRequest{Key: "k", Token: tok, Lease: time.Minute})
	require.NoError(t, err)

	caughtUp(t, primary, 1)
	replicas[0].Pause()
	require.NoError(t, plain.Complete(ctx, driver.CompleteRequest{Key: "k", Token: tok, Result: []byte("r"), Retention: time.Minute}))
	_, err = s.Claim(ctx, driver.ClaimRequest{Key: "k", Token: driver.NewToken(), Lease: time.Minute})
	require.ErrorIs(t, err, core.ErrUnreplicated, "the marker is on the primary only")

	replicas[0].Resume()
	r, err := s.Claim(ctx, driver.ClaimRequest{Key: "k", Token: driver.NewToken(), Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, driver.StateDone, r.State)
	require.Equal(t, []byte("r"), r.Result)
	require.Greater(t, r.Remaining, 50*time.Second, "reading the marker keeps its retention")
}

// With WaitReplicas, a claim sent again with the token that holds the key
// (go-redis sends a request again after its reply was lost) is acknowledged
// anew: while no replica has the claim, it answers ErrUnreplicated and the
// claim is released.
func TestClaimSentAgainWaitsForItsReplica(t *testing.T) {
	primary, replicas := testenv.StartRedisReplicas(t, 1)
	plain := newStore(t, otherClient(t, primary))
	s, err := redisstore.New(otherClient(t, primary), &redisstore.Config{Logger: quiet, WaitReplicas: 1, WaitTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	ctx := context.Background()
	req := driver.ClaimRequest{Key: "k", Token: driver.NewToken(), Lease: time.Minute}

	caughtUp(t, primary, 1)
	replicas[0].Pause()
	_, err = plain.Claim(ctx, req)
	require.NoError(t, err)
	_, err = s.Claim(ctx, req)
	require.ErrorIs(t, err, core.ErrUnreplicated, "the claim is on the primary only")
	replicas[0].Resume()
	r, err := s.Claim(ctx, driver.ClaimRequest{Key: "k", Token: driver.NewToken(), Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, driver.StateClaimed, r.State, "the unacknowledged claim was released")
}

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
