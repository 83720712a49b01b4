package pgstore_test

import (
	"context"
	"encoding/hex"
	"errors"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/internal/pgtest"
	"github.com/jobonce/jobonce/internal/testenv"
)

// notes collects what a Listener notifies.
type notes chan string

func (n notes) notify(key string) {
	select {
	case n <- key:
	default:
	}
}

// next returns the next notification within 10s.
func (n notes) next(t *testing.T) string {
	t.Helper()
	select {
	case k := <-n:
		return k
	case <-time.After(10 * time.Second):
		t.Fatal("no notification within 10s")
		return ""
	}
}

// TestListenerListensAgainAfterItsBackendIsTerminated: a Listener whose
// connection is ended by the server connects and listens again, notifies
// "" (every key is to be read again: what came meanwhile is lost), and
// notifies as before.
func TestListenerListensAgainAfterItsBackendIsTerminated(t *testing.T) {
	testenv.Short(t)
	ctx := ctxT(t)
	s, pool := newStore(t, nil)
	got := make(notes, 64)
	l, err := s.Listen(ctx, got.notify)
	require.NoError(t, err)
	defer l.Close()
	key := testenv.Prefix(t) + "k"
	require.NoError(t, l.Add(ctx, key))
	require.Equal(t, key, got.next(t), "listening began")

	var n int
	require.NoError(t, pool.QueryRow(ctx,
		`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query = 'LISTEN ' || quote_ident($1)`, s.Channel()).Scan(&n))
	require.Equal(t, 1, n, "the Listener's connection")
	require.Equal(t, "", got.next(t), "listening again, every key is to be read again")

	holder := driver.NewToken()
	r, err := s.Claim(ctx, driver.ClaimRequest{Key: key, Token: holder, Lease: time.Minute})
	require.NoError(t, err)
	r2, err := s.Await(ctx, driver.ClaimRequest{Key: key, Token: driver.NewToken(), Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, driver.StateRunning, r2.State)
	require.NoError(t, s.Complete(ctx, driver.CompleteRequest{Key: key, Token: holder, Retention: time.Minute, Fence: r.Fence}))
	require.Equal(t, key, got.next(t), "notified on the new connection")
}

// TestListenerCloseEndsItsGoroutineAndConnection: Close leaves no goroutine
// and no session behind.
func TestListenerCloseEndsItsGoroutineAndConnection(t *testing.T) {
	testenv.Short(t)
	ctx := ctxT(t)
	s, pool := newStore(t, nil)
	before := runtime.NumGoroutine()
	l, err := s.Listen(ctx, func(string) {})
	require.NoError(t, err)
	require.NoError(t, l.Close())
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	require.LessOrEqual(t, runtime.NumGoroutine(), before, "the Listener's goroutine ended")
	sessions := func() int {
		return count(t, pool, `SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN ' || quote_ident($1)`, s.Channel())
	}
	for sessions() > 0 && time.Now().Before(deadline) { // the server ends a session after its client left
		time.Sleep(5 * time.Millisecond)
	}
	require.Zero(t, sessions(), "its session ended")
}

// TestListenerConnectsThroughThePoolsHooks: the Listener's connection is
// made as the pool makes its own: BeforeConnect (which sets the user, as
// IAM token authentication sets the password) and AfterConnect (which
// names the session) run for it, again when it connects after its backend
// was terminated.
func TestListenerConnectsThroughThePoolsHooks(t *testing.T) {
	testenv.Short(t)
	ctx := ctxT(t)
	_, schema := pgtest.Postgres(t)
	cfg, err := pgxpool.ParseConfig(pgtest.DatabaseURL())
	require.NoError(t, err)
	user := cfg.ConnConfig.User
	cfg.ConnConfig.User = "jobonce_no_such_role"
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	app := "jobonce-hooked-" + testenv.RandomID(4)
	var before, after atomic.Int32
	cfg.BeforeConnect = func(_ context.Context, c *pgx.ConnConfig) error {
		before.Add(1)
		c.User = user
		return nil
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		after.Add(1)
		_, err := c.Exec(ctx, "SET application_name = '"+app+"'")
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := migratedStore(t, pool, nil)

	got := make(notes, 64)
	befores, afters := before.Load(), after.Load()
	l, err := s.Listen(ctx, got.notify)
	require.NoError(t, err, "the Listener connects as the pool's hooks say")
	defer l.Close()
	require.Equal(t, befores+1, before.Load(), "BeforeConnect ran for the Listener's connection")
	require.Equal(t, afters+1, after.Load(), "AfterConnect ran for the Listener's connection")
	key := testenv.Prefix(t) + "k"
	require.NoError(t, l.Add(ctx, key))
	require.Equal(t, key, got.next(t))

	var n int
	require.NoError(t, pool.QueryRow(ctx,
		`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1 AND query = 'LISTEN ' || quote_ident($2)`,
		app, s.Channel()).Scan(&n))
	require.Equal(t, 1, n, "the Listener's session, named by AfterConnect")
	require.Equal(t, "", got.next(t), "listening again")
	require.Equal(t, befores+2, before.Load(), "BeforeConnect ran again for the new connection")
}

// TestForgedNotificationsCostEachWaitingCopyBoundedReads: a role with no
// privilege on the store's table may LISTEN and NOTIFY on its channel, so
// it may forge the end of an awaited claim as often as it likes. A copy
// waiting for the key reads it a bounded number of times however many
// come (a few at once, then one per interval of the Guard's), and its
// outcome is the running copy's.
func TestForgedNotificationsCostEachWaitingCopyBoundedReads(t *testing.T) {
	testenv.Short(t)
	ctx := ctxT(t)
	s, pool := newStore(t, nil)
	awaits := testenv.NewAwaits(s)
	prefix := testenv.Prefix(t)
	g, err := core.New(awaits, &core.Config{KeyPrefix: prefix, PlainKeys: true, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })

	role := "jobonce_test_forger_" + testenv.RandomID(4)
	_, err = pool.Exec(ctx, "CREATE ROLE "+role+" LOGIN")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP ROLE IF EXISTS "+role) })
	cfg, err := pgx.ParseConfig(pgtest.DatabaseURL())
	require.NoError(t, err)
	cfg.User = role
	forger, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = forger.Close(context.Background()) })

	key := prefix + "forged"
	holder := driver.NewToken()
	r, err := s.Claim(ctx, driver.ClaimRequest{Key: key, Token: holder, Lease: time.Minute})
	require.NoError(t, err)
	second := make(chan core.Result, 1)
	go func() {
		res, _ := g.Run(ctx, core.Job{Key: "forged", WaitUntil: time.Now().Add(time.Minute)},
			func(context.Context) ([]byte, error) { return nil, nil })
		second <- res
	}()
	awaits.Began(t, 1)

	start, before := time.Now(), awaits.Count()
	const forged = 400
	for range forged {
		_, err := forger.Exec(ctx, "SELECT pg_notify($1, $2)", s.Channel(), hex.EncodeToString([]byte(key)))
		require.NoError(t, err)
	}
	elapsed := time.Since(start)
	reads := awaits.Count() - before
	bound := 10 + int64(elapsed/(10*time.Millisecond))
	t.Logf("%d forged notifications in %s: %d reads (bound %d)", forged, elapsed.Round(time.Millisecond), reads, bound)
	require.LessOrEqual(t, reads, bound, "forged notifications cost the store a read each")

	require.NoError(t, s.Complete(ctx, driver.CompleteRequest{Key: key, Token: holder, Retention: time.Minute, Fence: r.Fence}))
	require.Equal(t, core.Duplicate, (<-second).Outcome, "a forged notification never changes an outcome")
}

// TestListenerClosesEachConnectionOnce: a Listener closed while it cannot
// connect again, after its backend was terminated, hands each connection
// it made to the pool's BeforeClose hook once (a hook that counts or frees
// what AfterConnect took drifted when the broken one came twice).
func TestListenerClosesEachConnectionOnce(t *testing.T) {
	testenv.Short(t)
	ctx := ctxT(t)
	_, schema := pgtest.Postgres(t)
	cfg, err := pgxpool.ParseConfig(pgtest.DatabaseURL())
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	app := "jobonce-closed-" + testenv.RandomID(4)
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	var refuse atomic.Bool
	cfg.BeforeConnect = func(context.Context, *pgx.ConnConfig) error {
		if refuse.Load() {
			return errors.New("no connection now")
		}
		return nil
	}
	var mu sync.Mutex
	closes := map[*pgx.Conn]int{}
	cfg.BeforeClose = func(c *pgx.Conn) {
		mu.Lock()
		defer mu.Unlock()
		closes[c]++
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := migratedStore(t, pool, nil)

	got := make(notes, 64)
	l, err := s.Listen(ctx, got.notify)
	require.NoError(t, err)
	key := testenv.Prefix(t) + "k"
	require.NoError(t, l.Add(ctx, key))
	require.Equal(t, key, got.next(t))
	refuse.Store(true)
	var n int
	require.NoError(t, pool.QueryRow(ctx,
		`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1 AND query = 'LISTEN ' || quote_ident($2)`,
		app, s.Channel()).Scan(&n))
	require.Equal(t, 1, n)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(closes) > 0
	}, 10*time.Second, time.Millisecond, "the broken connection is closed")
	require.NoError(t, l.Close())
	mu.Lock()
	defer mu.Unlock()
	for c, n := range closes {
		require.Equal(t, 1, n, "connection %p handed to BeforeClose %d times", c, n)
	}
}
