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
	"github.com/jobonce/jobonce/internal/batchcall"
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
	var (
		key   string
		cause error
		done  chan core.Outcome
	)
	for attempt := 1; key == ""; attempt++ {
		started := make(chan struct{})
		done = make(chan core.Outcome, 1)
		go func() {
			out, _ := doomed.Do(ctx, fmt.Sprintf("job%d", attempt), func(ctx context.Context) error {
				close(started)
				<-ctx.Done()
				cause = context.Cause(ctx)
				return cause
			})
			done <- out
		}()
		select {
		case <-started:
			key = fmt.Sprintf("job%d", attempt)
		case out := <-done:
			// The claim was answered too late to run under its 300ms lease
			// (the process was held up): try again.
			require.Less(t, attempt, 5, "no copy ran; the last was %s", out)
		}
	}
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
		out, _ := healthy.Do(ctx, key, func(context.Context) error { ran++; return nil })
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

// guardBehindProxy returns a Guard on a store that mk makes on a client
// whose connections pass through a fault proxy, the proxy, and the Guard's
// warnings. Unless batched, the store is hidden behind driver.Store, so the
// Guard sends each marker on its own.
func guardBehindProxy(t *testing.T, mk func(testing.TB, redis.UniversalClient) *redisstore.Store, batched bool) (*core.Guard, *testenv.Proxy, *testenv.Warnings) {
	t.Helper()
	prefix := testenv.Prefix(t)
	direct := testenv.Redis(t, prefix)
	p := testenv.StartProxy(t, "127.0.0.1:0", direct.Options().Addr)
	viaProxy := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { _ = viaProxy.Close() })
	var store driver.Store = mk(t, viaProxy)
	if !batched {
		store = struct{ driver.Store }{store}
	}
	warned := new(testenv.Warnings)
	g, err := core.New(store, &core.Config{KeyPrefix: prefix, Logger: warned.Logger()})
	require.NoError(t, err)
	return g, p, warned
}

// A done marker whose reply the network lost is sent again by go-redis on a
// new connection: the script finds the marker its own claim wrote and
// answers it written, so the job reports Ran, with no warning, and its
// redelivery is a Duplicate with the stored result. Alone and in a batch.
func TestMarkerWhoseReplyWasLostIsRan(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(fmt.Sprint("batched=", batched), func(t *testing.T) {
			g, p, warned := guardBehindProxy(t, newStore, batched)

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

// legacyStore returns a Store on client that writes done markers as the
// previous release did (Config.LegacyMarkers).
func legacyStore(t testing.TB, client redis.UniversalClient) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(client, &redisstore.Config{Logger: quiet, LegacyMarkers: true})
	require.NoError(t, err)
	return s
}

// Under Config.LegacyMarkers the store passes the conformance suite but for
// the case that needs a marker to name its writer: CompleteSentAgain, whose
// complete sent again answers ErrLeaseLost without one
// (TestLegacyMarkerWhoseReplyWasLostIsLeaseLost pins that answer).
func TestConformanceWithLegacyMarkers(t *testing.T) {
	client := testenv.Redis(t, "jobonce-storetest:")
	storetest.Run(t, func(t *testing.T) driver.Store {
		if strings.HasSuffix(t.Name(), "/Store/CompleteSentAgain") {
			t.Skip("a legacy marker names no writer: a complete sent again answers ErrLeaseLost, see TestLegacyMarkerWhoseReplyWasLostIsLeaseLost")
		}
		return legacyStore(t, client)
	})
}

// Under Config.LegacyMarkers, each done marker is byte for byte what the
// previous release wrote (record.go: "d" fingerprint; "D", the
// fingerprint's length in one byte, the fingerprint, the result; "L", the
// length as a uvarint, the fingerprint, the result), and a Store without it
// reads it as done with its stored result.
func TestLegacyMarkersAreWrittenInThePreviousReleasesFormat(t *testing.T) {
	ctx := context.Background()
	prefix, client, current := prefixedStore(t)
	legacy := legacyStore(t, client)
	long := strings.Repeat("f", 300)
	for _, c := range []struct {
		name, fingerprint string
		result            []byte
		want              string
	}{
		{"no result", "fp", nil, "dfp"},
		{"empty result", "fp", []byte{}, "D\x02fp"},
		{"short fingerprint", "fp", []byte("res"), "D\x02fpres"},
		{"longest short fingerprint", strings.Repeat("s", 255), []byte("r"), "D\xff" + strings.Repeat("s", 255) + "r"},
		{"long fingerprint", long, []byte("res"), "L\xac\x02" + long + "res"},
	} {
		t.Run(c.name, func(t *testing.T) {
			key, tok := prefix+c.name, driver.NewToken()
			r, err := legacy.Claim(ctx, driver.ClaimRequest{Key: key, Token: tok, Fingerprint: c.fingerprint, Lease: time.Minute})
			require.NoError(t, err)
			require.Equal(t, driver.StateClaimed, r.State)
			require.NoError(t, legacy.Complete(ctx, driver.CompleteRequest{Key: key, Token: tok, Fingerprint: c.fingerprint, Result: c.result, Retention: time.Minute}))
			stored, err := client.Get(ctx, key).Result()
			require.NoError(t, err)
			require.Equal(t, c.want, stored, "the previous release's done value, with no writer")

			r, err = current.Claim(ctx, driver.ClaimRequest{Key: key, Token: driver.NewToken(), Fingerprint: c.fingerprint, Lease: time.Minute})
			require.NoError(t, err)
			require.Equal(t, driver.StateDone, r.State)
			require.Equal(t, c.fingerprint, r.Fingerprint)
			require.Equal(t, c.result, r.Result)
		})
	}
}

// During the upgrade, workers with and without Config.LegacyMarkers read
// each other's markers: a redelivery is a Duplicate with the stored result,
// whichever wrote the marker.
func TestLegacyAndNamedMarkersReadAsDuplicates(t *testing.T) {
	ctx := context.Background()
	prefix, client, current := prefixedStore(t)
	stores := map[string]*redisstore.Store{"legacy": legacyStore(t, client), "current": current}
	for writer, reader := range map[string]string{"legacy": "current", "current": "legacy"} {
		t.Run(writer+" marker", func(t *testing.T) {
			w, err := core.New(stores[writer], &core.Config{KeyPrefix: prefix, Logger: quiet})
			require.NoError(t, err)
			r, err := core.New(stores[reader], &core.Config{KeyPrefix: prefix, Logger: quiet})
			require.NoError(t, err)
			job := core.Job{Key: writer, Fingerprint: "payload"}
			res, err := w.Run(ctx, job, func(context.Context) ([]byte, error) { return []byte(writer + " result"), nil })
			require.NoError(t, err)
			require.Equal(t, core.Ran, res.Outcome)
			res, err = r.Run(ctx, job, func(context.Context) ([]byte, error) { return nil, errors.New("must not run") })
			require.NoError(t, err)
			require.Equal(t, core.Duplicate, res.Outcome)
			require.Equal(t, []byte(writer+" result"), res.Value)
		})
	}
}

// Under Config.LegacyMarkers a done marker names no writer, so a complete
// that go-redis sends again after the network lost its reply finds a marker
// it cannot prove its own: the job reports LeaseLost, warned about, as the
// previous release did; its redelivery is still a Duplicate.
func TestLegacyMarkerWhoseReplyWasLostIsLeaseLost(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(fmt.Sprint("batched=", batched), func(t *testing.T) {
			g, p, warned := guardBehindProxy(t, legacyStore, batched)

			ctx := context.Background()
			result := []byte("the result whose legacy marker's reply is lost")
			p.DropReplyOnce(result)
			res, err := g.Run(ctx, core.Job{Key: "job", Fingerprint: "same payload"}, func(context.Context) ([]byte, error) { return result, nil })
			require.NoError(t, err, "the effect happened: the delivery is handled")
			require.True(t, p.ReplyDropped(), "the marker's reply was lost")
			require.Equal(t, core.LeaseLost, res.Outcome, "a marker with no writer is not provably this claim's")
			require.NotEmpty(t, warned.Messages())

			res, err = g.Run(ctx, core.Job{Key: "job", Fingerprint: "same payload"}, func(context.Context) ([]byte, error) { return nil, errors.New("must not run") })
			require.NoError(t, err)
			require.Equal(t, core.Duplicate, res.Outcome)
			require.Equal(t, result, res.Value)
		})
	}
}

// Under Config.LegacyMarkers, a complete sent late by a claim whose lease
// lapsed finds the marker of the claim that took the key over, equal to
// its own: it answers ErrLeaseLost, never nil, alone and in a batch.
func TestLegacyMarkerOfAnotherClaimIsLeaseLost(t *testing.T) {
	ctx := context.Background()
	prefix, client, _ := prefixedStore(t)
	s := legacyStore(t, client)
	for _, batched := range []bool{false, true} {
		key := fmt.Sprint(prefix, "batched=", batched)
		a, b := driver.NewToken(), driver.NewToken()
		_, err := s.Claim(ctx, driver.ClaimRequest{Key: key, Token: a, Fingerprint: "a long fingerprint", Lease: time.Minute})
		require.NoError(t, err)
		require.NoError(t, client.Del(ctx, key).Err(), "A's claim lapses")
		r, err := s.Claim(ctx, driver.ClaimRequest{Key: key, Token: b, Fingerprint: "a long fingerprint", Lease: time.Minute})
		require.NoError(t, err)
		require.Equal(t, driver.StateClaimed, r.State)
		done := func(tok driver.Token) driver.CompleteRequest {
			return driver.CompleteRequest{Key: key, Token: tok, Fingerprint: "a long fingerprint", Result: []byte("r"), Retention: time.Minute}
		}
		require.NoError(t, s.Complete(ctx, done(b)))
		if batched {
			require.ErrorIs(t, batchcall.Completes(ctx, s, []driver.CompleteRequest{done(a)})[0], core.ErrLeaseLost)
		} else {
			require.ErrorIs(t, s.Complete(ctx, done(a)), core.ErrLeaseLost)
		}
	}
}
