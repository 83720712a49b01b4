package redisstore_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/stall"
	"github.com/jobonce/jobonce/internal/testenv"
)

// couldNotCheck is the start of New's warning about a check it could not
// make.
const couldNotCheck = "jobonce: redisstore: New could not check the server's eviction policy and persistence"

// startupClient returns a client of addr whose calls end with their context
// and are not sent again.
func startupClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// claimOnce makes one claim on s, which must succeed.
func claimOnce(t *testing.T, s *redisstore.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := s.Claim(ctx, driver.ClaimRequest{Key: "startup:" + driver.NewToken().String(), Token: driver.NewToken(), Lease: time.Minute})
	require.NoError(t, err)
}

// requireCouldNotCheck requires that logs hold exactly one warning, New's
// about the check it could not make, giving a reason that contains why.
// timedOut is the pattern of the reason New gives for a read that ended
// with why: why itself, or, when the process stalled across the read's end
// (1.8s) and New's wait's (2s) from start, also the wait's, which may then
// end first.
func timedOut(stalls *stall.Probe, start time.Time, why string) string {
	if stalls.Within(start.Add(1700*time.Millisecond), start.Add(2100*time.Millisecond)) >= 20*time.Millisecond {
		return why + "|no answer within"
	}
	return why
}

func requireCouldNotCheck(t *testing.T, logs *records, why string) {
	t.Helper()
	warns := logs.warns()
	require.Len(t, warns, 1, "%v", warns)
	require.Contains(t, warns[0]["msg"], couldNotCheck)
	require.Contains(t, warns[0]["msg"], "the first claim checks again")
	require.Regexp(t, why, warns[0]["error"])
}

// A server that does not answer New's check (the request is lost, the
// connection stays open) holds New up for the check's 2s bound only; New
// warns that it could not check, with the reason, and the first claim makes
// the check, long before CheckEvery (30s): it reports the server's risk.
func TestNewSaysItCouldNotCheckAHungServerAndTheFirstClaimChecks(t *testing.T) {
	t.Parallel()
	server := testenv.StartRedisServer(t) // no AOF, no RDB save: a persistence risk
	proxy := testenv.StartProxy(t, "127.0.0.1:0", server.Addr)
	proxy.LoseRequestOnce([]byte("maxmemory-policy")) // in the check's pipeline only
	var logs records
	stalls := stall.Bound(t)
	start := time.Now()
	s, err := redisstore.New(startupClient(t, proxy.Addr()), &redisstore.Config{Logger: slog.New(&logs)})
	stalls.RequireWithin(t, start, 3*time.Second, "the check is bounded by 2s")
	require.NoError(t, err)
	require.True(t, proxy.Silenced(), "the check's request was lost")
	requireCouldNotCheck(t, &logs, timedOut(stalls, start, "i/o timeout"))
	require.Empty(t, logs.events(), "nothing reported of a server not read")

	claimOnce(t, s)
	require.Equal(t, []string{"persistence"}, logs.events(), "the first claim checked")
	claimOnce(t, s)
	require.Equal(t, []string{"persistence"}, logs.events(), "and the next check waits for CheckEvery")
}

// A refused port: New warns that it could not check, with the reason, and
// once the server is up the first claim makes the check.
func TestNewSaysItCouldNotCheckARefusedPortAndTheFirstClaimChecks(t *testing.T) {
	t.Parallel()
	server := testenv.StartRedisServer(t)
	addr := testenv.ClosedAddr(t)
	var logs records
	s, err := redisstore.New(startupClient(t, addr), &redisstore.Config{Logger: slog.New(&logs)})
	require.NoError(t, err)
	requireCouldNotCheck(t, &logs, "connection refused")

	testenv.StartProxy(t, addr, server.Addr) // the server comes up
	claimOnce(t, s)
	require.Equal(t, []string{"persistence"}, logs.events(), "the first claim checked")
}

// A check that could not run does not show the client's password, should
// the server quote it back.
func TestCouldNotCheckHidesThePassword(t *testing.T) {
	t.Parallel()
	const password = "s3cret-pw"
	fake := startFake(t, &fakeRedis{auth: "-WRONGPASS password " + password + " refused\r\n"})
	client := redis.NewClient(&redis.Options{Addr: fake.Addr(), Password: password, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	var logs records
	_, err := redisstore.New(client, &redisstore.Config{Logger: slog.New(&logs)})
	require.NoError(t, err)
	requireCouldNotCheck(t, &logs, "WRONGPASS password xxxxx refused")
	require.NotContains(t, logs.warns()[0]["error"], password)
}

// With Config.WaitAOF, a WAITAOF probe that got no answer (a refused port, a
// hung server) is said at Warn, with the reason; New goes on.
func TestNewSaysItCouldNotProbeWaitAOF(t *testing.T) {
	t.Parallel()
	server := testenv.StartRedisServer(t, "--appendonly", "yes")
	hung := testenv.StartProxy(t, "127.0.0.1:0", server.Addr)
	hung.LoseRequestOnce([]byte("WAITAOF"))
	for _, tc := range []struct {
		name, addr, why string
	}{
		{"Refused", testenv.ClosedAddr(t), "connection refused"},
		{"Hung", hung.Addr(), "i/o timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs records
			stalls := stall.Bound(t)
			start := time.Now()
			_, err := redisstore.New(startupClient(t, tc.addr), &redisstore.Config{Logger: slog.New(&logs), SkipEvictionCheck: true, WaitAOF: true})
			require.NoError(t, err)
			warns := logs.warns()
			require.Len(t, warns, 1, "%v", warns)
			require.Contains(t, warns[0]["msg"], "jobonce: redisstore: New could not check that the server has WAITAOF and appendonly yes")
			require.Regexp(t, timedOut(stalls, start, tc.why), warns[0]["error"])
		})
	}
}

// hungServer accepts connections and reads every request but answers none,
// as a Redis server that hangs. It counts the connections a client keeps
// open.
type hungServer struct {
	ln   net.Listener
	open atomic.Int64
}

func startHungServer(t *testing.T) *hungServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	h := &hungServer{ln: ln}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.open.Add(1)
			wg.Go(func() {
				defer h.open.Add(-1)
				defer func() { _ = c.Close() }()
				_, _ = io.Copy(io.Discard, c) // until the client closes it, or the test ends
			})
			t.Cleanup(func() { _ = c.Close() })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	return h
}

func (h *hungServer) Addr() string { return h.ln.Addr().String() }

// requireClosed requires that the client close every connection it opened
// to h, as it does once a read ends, within a second.
func (h *hungServer) requireClosed(t *testing.T, why string) {
	t.Helper()
	require.Eventually(t, func() bool { return h.open.Load() == 0 }, time.Second, 10*time.Millisecond,
		"%s: %d connections still open", why, h.open.Load())
}

// newWithin runs New and fails the test when it has not returned within
// limit, instead of waiting for it.
func newWithin(t *testing.T, limit time.Duration, client redis.UniversalClient, cfg *redisstore.Config) (*redisstore.Store, time.Duration) {
	t.Helper()
	type result struct {
		s   *redisstore.Store
		err error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		s, err := redisstore.New(client, cfg)
		done <- result{s, err}
	}()
	select {
	case r := <-done:
		require.NoError(t, r.err)
		return r.s, time.Since(start)
	case <-time.After(limit):
		t.Fatalf("New has not returned after %s", limit)
		return nil, 0
	}
}

// Against a server that never answers, New returns within its 2s, its two
// reads (the check and the WAITAOF probe) made together, whatever the
// client's ContextTimeoutEnabled and ReadTimeout, warns of each read with
// the timeout that ended it, and leaves no read behind: the client has closed its
// connections by the time New returns, or just after.
func TestNewAnswersWithinTwoSecondsAgainstAHungServerWhateverTheClient(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opt  redis.Options
	}{
		{"ContextTimeoutEnabled", redis.Options{ContextTimeoutEnabled: true}},
		{"DefaultReadTimeout", redis.Options{}},
		{"NoReadTimeout", redis.Options{ReadTimeout: -1}},
	} {
		for _, waitAOF := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/WaitAOF=%t", tc.name, waitAOF), func(t *testing.T) {
				t.Parallel()
				hung := startHungServer(t)
				opt := tc.opt
				opt.Addr = hung.Addr()
				client := redis.NewClient(&opt)
				t.Cleanup(func() { _ = client.Close() })
				var logs records
				stalls := stall.Bound(t)
				start := time.Now()
				newWithin(t, 15*time.Second, client, &redisstore.Config{Logger: slog.New(&logs), WaitAOF: waitAOF})
				stalls.RequireWithin(t, start, 2500*time.Millisecond, "New waits 2s at most")

				var reasons []string
				for _, w := range logs.warns() {
					if strings.Contains(w["msg"], "could not check") {
						why := timedOut(stalls, start, "i/o timeout|context deadline exceeded")
						if !strings.Contains(why, "no answer within") {
							require.NotContains(t, w["error"], "no answer within", "the read ended on its own: %v", w)
						}
						require.Regexp(t, why, w["error"], "the read ended on its own: %v", w)
						reasons = append(reasons, w["msg"])
					}
				}
				want := 1
				if waitAOF {
					want = 2
				}
				require.Len(t, reasons, want, "a warning per read: %v", logs.warns())
				require.Contains(t, reasons[0], couldNotCheck)
				hung.requireClosed(t, "the reads have ended")
			})
		}
	}
}

// A Cluster client whose calls never end (ReadTimeout -1, no
// ContextTimeoutEnabled) reads its slots before New can bound anything: New
// still returns within its 2s, saying it got no answer, and the read left
// behind ends when the client is closed.
func TestNewAnswersWithinTwoSecondsForAClusterClientThatNeverTimesOut(t *testing.T) {
	t.Parallel()
	hung := startHungServer(t)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{hung.Addr()}, ReadTimeout: -1, MaxRedirects: -1})
	var logs records
	_, took := newWithin(t, 15*time.Second, client, &redisstore.Config{Logger: slog.New(&logs), WaitAOF: true})
	require.Less(t, took, 2500*time.Millisecond, "New waits 2s at most")
	var reasons []string
	for _, w := range logs.warns() {
		if strings.Contains(w["msg"], "could not check") {
			reasons = append(reasons, w["error"])
		}
	}
	require.Len(t, reasons, 2, "%v", logs.warns())
	for _, r := range reasons {
		require.Contains(t, r, "jobonce: redisstore: no answer within 2s; the read goes on until the server answers or the client is closed")
	}
	require.NotZero(t, hung.open.Load(), "the read goes on past New")
	require.NoError(t, client.Close())
	hung.requireClosed(t, "closing the client ends the read")
}

// The check a claim makes (here the first, New's check skipped) adds at
// most its 250ms to the claim against a server that does not answer it,
// whatever the client's ContextTimeoutEnabled and ReadTimeout; the claim
// itself succeeds.
func TestTheCheckWithinAClaimIsBoundedWhateverTheClient(t *testing.T) {
	t.Parallel()
	server := testenv.StartRedisServer(t)
	for _, tc := range []struct {
		name string
		opt  redis.Options
	}{
		{"ContextTimeoutEnabled", redis.Options{ContextTimeoutEnabled: true}},
		{"DefaultReadTimeout", redis.Options{}},
		{"NoReadTimeout", redis.Options{ReadTimeout: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			proxy := testenv.StartProxy(t, "127.0.0.1:0", server.Addr)
			opt := tc.opt
			opt.Addr, opt.MaxRetries = proxy.Addr(), -1
			client := redis.NewClient(&opt)
			t.Cleanup(func() { _ = client.Close() })
			s, _ := newWithin(t, 15*time.Second, client, &redisstore.Config{Logger: quiet, SkipEvictionCheck: true})
			proxy.LoseRequestOnce([]byte("maxmemory-policy")) // in the check's pipeline only

			stalls := stall.Bound(t)
			done := make(chan error, 1)
			start := time.Now()
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_, err := s.Claim(ctx, driver.ClaimRequest{Key: "startup:" + driver.NewToken().String(), Token: driver.NewToken(), Lease: time.Minute})
				done <- err
			}()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(15 * time.Second):
				t.Fatal("the claim has not returned after 15s")
			}
			require.True(t, proxy.Silenced(), "the check's request was lost")
			stalls.RequireWithin(t, start, 750*time.Millisecond, "the check adds 250ms at most")
		})
	}
}
