package redisstore_test

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/internal/testenv"
)

// namedClient returns a client whose connections carry a name of the
// test's own, so that CLIENT LIST tells them apart on a shared server.
func namedClient(t *testing.T) (*redis.Client, string) {
	t.Helper()
	opt, err := redis.ParseURL(testenv.RedisURL())
	require.NoError(t, err)
	opt.ClientName = "jobonce-notify-" + testenv.RandomID(4)
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c, opt.ClientName
}

// subscribers returns the channel counts of the connections named name that
// are subscribed to something.
func subscribers(t *testing.T, admin *redis.Client, name string) []int {
	t.Helper()
	list, err := admin.ClientList(context.Background()).Result()
	require.NoError(t, err)
	var subs []int
	for line := range strings.SplitSeq(strings.TrimSpace(list), "\n") {
		f := fields(line)
		if f["name"] != name {
			continue
		}
		n, _ := strconv.Atoi(f["sub"])
		s, _ := strconv.Atoi(f["ssub"])
		if n+s > 0 || strings.Contains(f["flags"], "P") {
			subs = append(subs, n+s)
		}
	}
	return subs
}

// subscriberIDs returns the ids of the connections named name that are
// subscribed to something.
func subscriberIDs(t *testing.T, admin *redis.Client, name string) []string {
	t.Helper()
	list, err := admin.ClientList(context.Background()).Result()
	require.NoError(t, err)
	var ids []string
	for line := range strings.SplitSeq(strings.TrimSpace(list), "\n") {
		if f := fields(line); f["name"] == name && strings.Contains(f["flags"], "P") {
			ids = append(ids, f["id"])
		}
	}
	return ids
}

func fields(line string) map[string]string {
	f := map[string]string{}
	for kv := range strings.FieldsSeq(line) {
		k, v, _ := strings.Cut(kv, "=")
		f[k] = v
	}
	return f
}

// waiting starts a copy of key that finds it held by hold and waits up to
// within; its outcome comes on the channel.
func waiting(ctx context.Context, g *core.Guard, key string, within time.Duration) <-chan core.Result {
	ch := make(chan core.Result, 1)
	go func() {
		res, _ := g.Run(ctx, core.Job{Key: key, WaitUntil: time.Now().Add(within)}, func(context.Context) ([]byte, error) {
			return []byte("second"), nil
		})
		ch <- res
	}()
	return ch
}

// held claims key on g's store directly, so that copies find it running.
type held struct {
	key   string
	token driver.Token
	fence int64
}

func holdKey(t *testing.T, s driver.Store, key string) held {
	t.Helper()
	h := held{key: key, token: driver.NewToken()}
	r, err := s.Claim(context.Background(), driver.ClaimRequest{Key: key, Token: h.token, Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, driver.StateClaimed, r.State)
	h.fence = r.Fence
	return h
}

func (h held) complete(t *testing.T, s driver.Store) {
	t.Helper()
	require.NoError(t, s.Complete(context.Background(), driver.CompleteRequest{Key: h.key, Token: h.token, Retention: time.Minute, Fence: h.fence}))
}

// awaitedBy returns once the key's awaited mark is set: a waiting copy
// read the key after its subscription was confirmed.
func awaitedBy(t *testing.T, rdb *redis.Client, key string) string {
	t.Helper()
	mark := key + "{" + key + "}\x00awaited"
	require.Eventually(t, func() bool { return rdb.Exists(context.Background(), mark).Val() == 1 }, 10*time.Second, time.Millisecond, "no copy marked the key awaited")
	return mark
}

func TestWaitersOnManyKeysShareOneSubscription(t *testing.T) {
	prefix := testenv.Prefix(t)
	admin := testenv.Redis(t, prefix)
	client, name := namedClient(t)
	s := newStore(t, client)
	g, err := core.New(s, &core.Config{KeyPrefix: prefix, PlainKeys: true, Logger: quiet, WaitingShare: 1})
	require.NoError(t, err)
	ctx := context.Background()
	before := runtime.NumGoroutine()
	const n = 10
	holds := make([]held, n)
	copies := make([]<-chan core.Result, n)
	for i := range n {
		key := "many-" + strconv.Itoa(i)
		holds[i] = holdKey(t, s, prefix+key)
		copies[i] = waiting(ctx, g, key, time.Minute)
	}
	for _, h := range holds {
		awaitedBy(t, admin, h.key)
	}
	require.Equal(t, []int{n}, subscribers(t, admin, name), "one connection subscribed to every waiting key")
	for i, h := range holds {
		h.complete(t, s)
		require.Equal(t, core.Duplicate, (<-copies[i]).Outcome)
	}
	require.Eventually(t, func() bool { return len(subscribers(t, admin, name)) == 0 }, 5*time.Second, 5*time.Millisecond,
		"the connection unsubscribed from each key as its copies left")
	require.NoError(t, g.Close())
	requireGoroutines(t, before, "the Listener's goroutines ended with Close")
}

// requireGoroutines polls, for up to 5s, until no more than n goroutines
// run. (require.Eventually runs its condition on goroutines of its own.)
func requireGoroutines(t *testing.T, n int, msg string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%s: %d goroutines, %d before:\n%s", msg, runtime.NumGoroutine(), n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestAwaitedMarkLivesNoLongerThanTheClaim(t *testing.T) {
	prefix, rdb, s := prefixedStore(t)
	ctx := context.Background()
	h := holdKey(t, s, prefix+"mark")
	require.NoError(t, rdb.PExpire(ctx, h.key, 20*time.Second).Err())
	r, err := s.Await(ctx, driver.ClaimRequest{Key: h.key, Token: driver.NewToken(), Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, driver.StateRunning, r.State)
	mark := h.key + "{" + h.key + "}\x00awaited"
	left := rdb.PTTL(ctx, mark).Val()
	require.Positive(t, left)
	require.LessOrEqual(t, left, 20*time.Second, "the mark expires with the running claim's lease")
	h.complete(t, s)
	require.Zero(t, rdb.Exists(ctx, mark).Val(), "the complete deleted the mark")

	tagged := holdKey(t, s, prefix+"{user-42}:mail")
	_, err = s.Await(ctx, driver.ClaimRequest{Key: tagged.key, Token: driver.NewToken(), Lease: time.Minute})
	require.NoError(t, err)
	require.EqualValues(t, 1, rdb.Exists(ctx, tagged.key+"\x00awaited").Val(), "a key's hash tag names its mark's slot")
	require.NoError(t, s.Release(ctx, tagged.key, tagged.token))
	require.Zero(t, rdb.Exists(ctx, tagged.key+"\x00awaited").Val(), "the release deleted the mark")
}

func TestAwaitedMarkNeverTouchesAnotherValue(t *testing.T) {
	prefix, rdb, s := prefixedStore(t)
	ctx := context.Background()
	h := holdKey(t, s, prefix+"{t}k")
	mark := h.key + "\x00awaited"
	require.NoError(t, rdb.Set(ctx, mark, "someone else's", time.Minute).Err())
	_, err := s.Await(ctx, driver.ClaimRequest{Key: h.key, Token: driver.NewToken(), Lease: time.Minute})
	require.NoError(t, err)
	h.complete(t, s)
	require.Equal(t, "someone else's", rdb.Get(ctx, mark).Val(), "a key that is no mark is neither overwritten nor deleted")
}

func TestLostSignalSettlesByTheCopysDeadline(t *testing.T) {
	for _, lose := range []string{"mark deleted by hand", "subscription killed", "an earlier release's complete"} {
		t.Run(lose, func(t *testing.T) {
			prefix := testenv.Prefix(t)
			admin := testenv.Redis(t, prefix)
			client, name := namedClient(t)
			s := newStore(t, client)
			g, err := core.New(s, &core.Config{KeyPrefix: prefix, PlainKeys: true, Logger: quiet})
			require.NoError(t, err)
			ctx := context.Background()
			h := holdKey(t, s, prefix+"lost")
			start := time.Now()
			second := waiting(ctx, g, "lost", 3*time.Second)
			mark := awaitedBy(t, admin, h.key)
			switch lose {
			case "mark deleted by hand":
				require.NoError(t, admin.Del(ctx, mark).Err())
				h.complete(t, s)
			case "subscription killed":
				ids := subscriberIDs(t, admin, name)
				require.Len(t, ids, 1)
				require.NoError(t, admin.Do(ctx, "CLIENT", "KILL", "ID", ids[0]).Err())
				h.complete(t, s)
			case "an earlier release's complete":
				// The previous release's complete.lua: no mark, no publish.
				const previous = `local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, 17) == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) return 1 end
return 0`
				owner := "F" + string(h.token[:])
				require.NoError(t, admin.Eval(ctx, previous, []string{h.key}, owner, "wxxxxxxxxd", 60000).Err())
			}
			select {
			case res := <-second:
				require.Equal(t, core.Duplicate, res.Outcome, "a lost signal costs latency, never the outcome")
			case <-time.After(5 * time.Second):
				t.Fatal("the waiting copy did not settle by its deadline")
			}
			require.Less(t, time.Since(start), 3*time.Second+500*time.Millisecond)
		})
	}
}

// TestRingWaitersAreWoken: on a Ring, which routes each key to a shard by a
// hash of its own, a Listener listens on every shard, so copies waiting on
// keys of either shard are woken by the done marker.
func TestRingWaitersAreWoken(t *testing.T) {
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{
		"a": testenv.StartRedisServer(t).Addr, "b": testenv.StartRedisServer(t).Addr}})
	t.Cleanup(func() { _ = ring.Close() })
	s := newStore(t, ring)
	g, err := core.New(s, &core.Config{PlainKeys: true, Logger: quiet, WaitingShare: 1})
	require.NoError(t, err)
	ctx := context.Background()
	shards := map[string]bool{}
	const n = 8
	holds := make([]held, n)
	copies := make([]<-chan core.Result, n)
	for i := range n {
		key := "ring-" + strconv.Itoa(i)
		stored, err := g.StoredKey(key)
		require.NoError(t, err)
		holds[i] = holdKey(t, s, stored)
		copies[i] = waiting(ctx, g, key, time.Minute)
	}
	var mu sync.Mutex
	require.NoError(t, ring.ForEachShard(ctx, func(ctx context.Context, shard *redis.Client) error {
		n, err := shard.DBSize(ctx).Result()
		mu.Lock()
		defer mu.Unlock()
		if n > 0 {
			shards[shard.Options().Addr] = true
		}
		return err
	}))
	require.Len(t, shards, 2, "the keys are on both shards")
	for i, h := range holds {
		awaited := func() bool {
			return ring.Exists(ctx, h.key+"{"+h.key+"}\x00awaited").Val() == 1
		}
		require.Eventually(t, awaited, 10*time.Second, time.Millisecond, "the copy of %s waits", h.key)
		start := time.Now()
		h.complete(t, s)
		res := <-copies[i]
		require.Equal(t, core.Duplicate, res.Outcome)
		require.Less(t, time.Since(start), 900*time.Millisecond, "woken by the signal of %s's shard", h.key)
	}
}
