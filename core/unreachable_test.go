package core_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// TestUnreachableAllowsOnlyTransportFailures: FailOpen's classification
// takes a failure to reach the store (a dial refused, a broken connection,
// the Guard's StoreTimeout on a live caller, a store's ErrUnreachable),
// and nothing else: not an answer the server gave (PostgreSQL's are
// core/pgstore's TestFailOpenDoesNotRunWhenPostgreSQLAnswersAnError), an unacknowledged
// write, a panic, the caller's cancellation, or an error it does not know.
func TestUnreachableAllowsOnlyTransportFailures(t *testing.T) {
	ctx := context.Background()
	_, dialErr := net.DialTimeout("tcp", closedAddr(t), time.Second)
	var opErr *net.OpError
	require.ErrorAs(t, dialErr, &opErr, "a dial to a closed port fails with a *net.OpError")

	rdb := testenv.Redis(t, "")
	redisAnswer := rdb.Do(ctx, "NO-SUCH-COMMAND").Err()
	var re redis.Error
	require.ErrorAs(t, redisAnswer, &re, "the server answers an unknown command with an error")

	done, cancel := context.WithCancel(ctx)
	cancel()
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"a dial refused", ctx, dialErr, true},
		{"a dial refused, wrapped", ctx, fmt.Errorf("redisstore: %w", dialErr), true},
		{"a connection closed", ctx, io.EOF, true},
		{"a reply cut short", ctx, fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{"ECONNREFUSED", ctx, fmt.Errorf("dial: %w", syscall.ECONNREFUSED), true},
		{"a read failed", ctx, &net.OpError{Op: "read", Net: "tcp", Err: &net.AddrError{Err: "x"}}, true},
		{"ECONNRESET errno", ctx, fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{"EPIPE", ctx, fmt.Errorf("write: %w", syscall.EPIPE), true},
		{"StoreTimeout on a live caller", ctx, fmt.Errorf("claim: %w", context.DeadlineExceeded), true},
		{"a shared round trip past StoreTimeout", ctx, core.ErrStoreStuck, true},
		{"a store's ErrUnreachable", ctx, fmt.Errorf("%w: %w", driver.ErrUnreachable, redis.ErrPoolTimeout), true},

		{"no error", ctx, nil, false},
		{"a Redis answer (OOM, READONLY…)", ctx, redisAnswer, false},
		{"a Redis answer, wrapped", ctx, fmt.Errorf("claim: %w", redisAnswer), false},
		{"a server's answer with an SQLSTATE (as pgconn.PgError)", ctx, sqlStateError("53100"), false},
		{"a server's answer with an SQLSTATE, beside a broken connection", ctx, fmt.Errorf("pgstore: %w: %w", sqlStateError("57014"), io.ErrUnexpectedEOF), false},
		{"a server's answer with an error code (as the AWS SDK's APIError)", ctx, errorCode("ThrottlingException"), false},
		{"a server's answer with an error code, until StoreTimeout", ctx, fmt.Errorf("dynamostore: %w (%w)", errorCode("ThrottlingException"), context.DeadlineExceeded), false},
		{"an unacknowledged write", ctx, fmt.Errorf("%w: 0 of 1 replicas within 100ms", core.ErrUnreplicated), false},
		{"an unacknowledged write whose wait broke", ctx, fmt.Errorf("%w: WAIT: %w", core.ErrUnreplicated, io.EOF), false},
		{"a store panic", ctx, fmt.Errorf("%w: boom", core.ErrStorePanicked), false},
		{"an invalid key", ctx, core.ErrInvalidKey, false},
		{"a lost lease", ctx, core.ErrLeaseLost, false},
		{"a cancellation not the caller's", ctx, context.Canceled, false},
		{"an unknown error", ctx, errors.New("jobonce: unexpected claim reply string"), false},
		{"the caller's cancellation", done, fmt.Errorf("x: %w: %w", context.Canceled, dialErr), false},
		{"a timeout once the caller is done", done, fmt.Errorf("claim: %w", context.DeadlineExceeded), false},
	} {
		require.Equal(t, c.want, core.Unreachable(c.ctx, c.err), "%s: %v", c.name, c.err)
	}
}

// copies runs n copies of a job under key on g, each started once the one
// before has returned or started its job, and returns their outcomes and
// how many times the job ran.
func copies(t *testing.T, g *core.Guard, key string, n int) ([]core.Outcome, int32) {
	t.Helper()
	ctx := context.Background()
	var effects atomic.Int32
	release := make(chan struct{})
	outs := make([]core.Outcome, n)
	done := make([]chan struct{}, n)
	for i := range n {
		started := make(chan struct{})
		done[i] = make(chan struct{})
		go func() {
			defer close(done[i])
			outs[i], _ = g.Do(ctx, key, func(context.Context) error {
				effects.Add(1)
				close(started)
				<-release // every copy that runs overlaps the next
				return nil
			})
		}()
		select {
		case <-started:
		case <-done[i]:
		case <-time.After(10 * time.Second):
			t.Fatalf("copy %d neither ran nor returned", i)
		}
	}
	close(release)
	for _, d := range done {
		<-d
	}
	return outs, effects.Load()
}

// TestFailOpenDoesNotRunAnUnacknowledgedClaim: with WaitReplicas and the
// replica down, the primary answers every claim, but its write goes
// unacknowledged and is released (ErrUnreplicated). That is no outage:
// FailOpen runs nothing, and no two copies run.
func TestFailOpenDoesNotRunAnUnacknowledgedClaim(t *testing.T) {
	primary, replicas := testenv.StartRedisReplicas(t, 1)
	replicas[0].Kill()
	rdb := redis.NewClient(&redis.Options{Addr: primary.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := redisstore.New(rdb, &redisstore.Config{Logger: testenv.Quiet, WaitReplicas: 1, WaitTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, rdb.Ping(context.Background()).Err(), "the primary is healthy")

	var seen testenv.Outcomes
	g := testenv.NewGuard(t, store, &core.Config{FailOpen: true, Observer: seen.Observe})
	outs, effects := copies(t, g, "unacked", 2)
	require.Equal(t, []core.Outcome{core.Unavailable, core.Unavailable}, outs)
	require.Zero(t, effects)
	require.Zero(t, seen.Get(core.Unguarded))
	for _, e := range seen.Events() {
		require.ErrorIs(t, e.Err, core.ErrStoreUnavailable)
		require.ErrorIs(t, e.Err, core.ErrUnreplicated)
	}
}

// outOfMemory returns a client of a Redis of its own at its maxmemory under
// noeviction: every write is answered OOM, while PING answers PONG.
func outOfMemory(t *testing.T) *redis.Client {
	t.Helper()
	server := testenv.StartRedisServer(t, "--maxmemory", "2mb", "--maxmemory-policy", "noeviction")
	rdb := redis.NewClient(&redis.Options{Addr: server.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	value := strings.Repeat("x", 64<<10)
	for i := 0; ; i++ {
		require.Less(t, i, 1000, "2mb never filled")
		err := rdb.Set(ctx, fmt.Sprint("fill:", i), value, 0).Err()
		if err != nil {
			require.True(t, strings.HasPrefix(err.Error(), "OOM"), "a write to a full Redis is answered OOM: %v", err)
			break
		}
	}
	require.Equal(t, "PONG", rdb.Ping(ctx).Val())
	return rdb
}

// TestFailOpenDoesNotRunWhenRedisAnswersOutOfMemory: a Redis at its
// maxmemory under noeviction answers every claim, and every Enqueue
// marker, with an OOM error. That is an answer, no outage: FailOpen runs
// no copy and publishes nothing.
func TestFailOpenDoesNotRunWhenRedisAnswersOutOfMemory(t *testing.T) {
	rdb := outOfMemory(t)
	store, err := redisstore.New(rdb, &redisstore.Config{Logger: testenv.Quiet})
	require.NoError(t, err)
	var seen testenv.Outcomes
	g := testenv.NewGuard(t, store, &core.Config{FailOpen: true, Observer: seen.Observe})

	outs, effects := copies(t, g, "oom", 3)
	require.Equal(t, []core.Outcome{core.Unavailable, core.Unavailable, core.Unavailable}, outs)
	require.Zero(t, effects)
	for _, e := range seen.Events() {
		require.ErrorIs(t, e.Err, core.ErrStoreUnavailable)
		require.ErrorContains(t, e.Err, "OOM")
	}

	published := false
	ok, err := g.Enqueue(context.Background(), "oom", time.Minute, func(context.Context) error { published = true; return nil })
	require.ErrorIs(t, err, core.ErrStoreUnavailable)
	require.ErrorContains(t, err, "OOM")
	require.False(t, ok)
	require.False(t, published)
}

// TestFailOpenRunsUnguardedWhenTheStoreCannotBeReached: FailOpen still does
// what it is for. A Redis nobody listens for runs the job unguarded and
// Enqueue publishes without a marker; so does a Redis that stopped
// answering, once StoreTimeout ends.
func TestFailOpenRunsUnguardedWhenTheStoreCannotBeReached(t *testing.T) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: closedAddr(t), MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	store, err := redisstore.New(rdb, &redisstore.Config{Logger: testenv.Quiet})
	require.NoError(t, err)
	var seen testenv.Outcomes
	g := testenv.NewGuard(t, store, &core.Config{FailOpen: true, Observer: seen.Observe})

	ran := false
	out, err := g.Do(ctx, "down", func(context.Context) error { ran = true; return nil })
	require.NoError(t, err)
	require.Equal(t, core.Unguarded, out)
	require.True(t, ran)
	var opErr *net.OpError
	require.ErrorAs(t, seen.Events()[0].Err, &opErr, "the cause reported is the dial's failure")

	claims := g.Claim(ctx, core.Job{Key: "down-1"}, core.Job{Key: "down-2"})
	for _, c := range claims {
		require.True(t, c.Runs(), "a batch's claims fail open too")
		res, err := c.Work(ctx, func(context.Context) ([]byte, error) { return nil, nil })
		require.NoError(t, err)
		require.Equal(t, core.Unguarded, res.Outcome)
	}

	published := false
	ok, err := g.Enqueue(ctx, "down", time.Minute, func(context.Context) error { published = true; return nil })
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, published)

	// A store that stopped answering: the Guard's StoreTimeout ends the
	// claim while the caller's context is live.
	hung := testenv.NewGuard(t, testenv.HangingRedis(t, testenv.Redis(t, "")),
		&core.Config{FailOpen: true, StoreTimeout: 100 * time.Millisecond})
	ran = false
	out, err = hung.Do(ctx, "hung", func(context.Context) error { ran = true; return nil })
	require.NoError(t, err)
	require.Equal(t, core.Unguarded, out)
	require.True(t, ran)
}

// sqlStateError is an error a database server answered, carrying its
// SQLSTATE the way pgconn.PgError does (core knows no database client).
type sqlStateError string

// errorCode is an error a server answered with a code, as the AWS SDK's
// smithy.APIError is.
type errorCode string

func (e errorCode) Error() string     { return "api error " + string(e) }
func (e errorCode) ErrorCode() string { return string(e) }

func (e sqlStateError) Error() string {
	return "ERROR: the server answered (SQLSTATE " + string(e) + ")"
}
func (e sqlStateError) SQLState() string { return string(e) }

// pastDeadline is a context whose deadline has passed by the clock while
// its timer has not fired yet: Err is still nil. A store client that sets
// its socket's deadline from the context (go-redis with
// ContextTimeoutEnabled) answers with an i/o timeout in that instant.
type pastDeadline struct{ context.Context }

func (pastDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// socketTimeout is a memstore whose claims fail as a socket deadline does.
type socketTimeout struct{ *memstore.Store }

func (socketTimeout) Claim(context.Context, driver.ClaimRequest) (driver.ClaimReply, error) {
	return driver.ClaimReply{}, &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
}

// A claim that times out because the caller's own deadline passed is the
// caller's cancellation, not an outage: Canceled, and the job does not run,
// not even with FailOpen; Enqueue publishes nothing.
func TestTimeoutAtTheCallersDeadlineIsCanceled(t *testing.T) {
	for _, failOpen := range []bool{false, true} {
		g, err := core.New(socketTimeout{memstore.New()}, &core.Config{FailOpen: failOpen})
		require.NoError(t, err)
		ctx := pastDeadline{context.Background()}
		ran := false
		out, err := g.Do(ctx, "k", func(context.Context) error { ran = true; return nil })
		require.ErrorIs(t, err, context.DeadlineExceeded, "FailOpen %v", failOpen)
		require.NotErrorIs(t, err, core.ErrStoreUnavailable)
		require.Equal(t, core.Canceled, out, "FailOpen %v", failOpen)
		require.False(t, ran, "FailOpen %v", failOpen)

		published := false
		ok, err := g.Enqueue(ctx, "k", time.Minute, func(context.Context) error { published = true; return nil })
		require.ErrorIs(t, err, context.DeadlineExceeded, "FailOpen %v", failOpen)
		require.False(t, ok)
		require.False(t, published, "FailOpen %v", failOpen)
	}
}
