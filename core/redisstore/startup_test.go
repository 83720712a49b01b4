package redisstore_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/redisstore"
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
func requireCouldNotCheck(t *testing.T, logs *records, why string) {
	t.Helper()
	warns := logs.warns()
	require.Len(t, warns, 1, "%v", warns)
	require.Contains(t, warns[0]["msg"], couldNotCheck)
	require.Contains(t, warns[0]["msg"], "the first claim checks again")
	require.Contains(t, warns[0]["error"], why)
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
	start := time.Now()
	s, err := redisstore.New(startupClient(t, proxy.Addr()), &redisstore.Config{Logger: slog.New(&logs)})
	took := time.Since(start)
	require.NoError(t, err)
	require.True(t, proxy.Silenced(), "the check's request was lost")
	require.Less(t, took, 3*time.Second, "the check is bounded by 2s")
	requireCouldNotCheck(t, &logs, "i/o timeout")
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
			_, err := redisstore.New(startupClient(t, tc.addr), &redisstore.Config{Logger: slog.New(&logs), SkipEvictionCheck: true, WaitAOF: true})
			require.NoError(t, err)
			warns := logs.warns()
			require.Len(t, warns, 1, "%v", warns)
			require.Contains(t, warns[0]["msg"], "jobonce: redisstore: New could not check that the server has WAITAOF and appendonly yes")
			require.Contains(t, warns[0]["error"], tc.why)
		})
	}
}
