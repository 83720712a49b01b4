package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/pgstore"
	"github.com/jobonce/jobonce/internal/batchcall"
	"github.com/jobonce/jobonce/internal/pgtest"
)

// Every bad Config field gets an error of its own that names the package
// and the field, from New, Migrate and MigrationSQL, before any I/O.
func TestNewRejectsBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, err := pgstore.New(ctx, nil, nil)
	require.EqualError(t, err, "jobonce: pgstore: New: pool is nil")
	require.EqualError(t, pgstore.Migrate(ctx, nil, nil), "jobonce: pgstore: Migrate: pool is nil")

	// A pool connects lazily: validation fails before any I/O.
	pool, err := pgxpool.New(ctx, "postgres://nobody@127.0.0.1:1/none")
	require.NoError(t, err)
	defer pool.Close()
	cases := []struct {
		cfg   pgstore.Config
		field string
		why   string
	}{
		{pgstore.Config{Table: strings.Repeat("t", 60)}, "Table", "is longer than 48 bytes"},
		{pgstore.Config{Table: "a\x00b"}, "Table", "must be valid UTF-8 without NUL bytes"},
		{pgstore.Config{Schema: "\xff"}, "Schema", "must be valid UTF-8 without NUL bytes"},
		{pgstore.Config{Schema: strings.Repeat("s", 64)}, "Schema", "is longer than 63 bytes"},
		{pgstore.Config{LockTimeout: -1}, "LockTimeout", "must not be negative, got -1ns"},
		{pgstore.Config{LockTimeout: time.Microsecond}, "LockTimeout", "must be between 1ms and"},
		{pgstore.Config{MigrateLockTimeout: -1}, "MigrateLockTimeout", "must not be negative, got -1ns"},
		{pgstore.Config{MigrateLockTimeout: time.Microsecond}, "MigrateLockTimeout", "must be between 1ms and"},
		{pgstore.Config{RetryAfter: -1}, "RetryAfter", "must not be negative, got -1ns"},
		{pgstore.Config{PruneBatch: -1}, "PruneBatch", "must not be negative, got -1"},
	}
	for _, tc := range cases {
		_, err := pgstore.New(ctx, pool, &tc.cfg)
		require.ErrorContains(t, err, "jobonce: pgstore: Config."+tc.field+" ", "%+v", tc.cfg)
		require.ErrorContains(t, err, tc.why)
		require.ErrorContains(t, pgstore.Migrate(ctx, pool, &tc.cfg), "jobonce: pgstore: Config."+tc.field+" ")
		_, err = pgstore.MigrationSQL(&tc.cfg)
		require.ErrorContains(t, err, "jobonce: pgstore: Config."+tc.field+" ")
	}
}

func TestMigrationSQLQuotesIdentifiers(t *testing.T) {
	t.Parallel()
	sql, err := pgstore.MigrationSQL(&pgstore.Config{Schema: `my"schema`, Table: "Keys"})
	require.NoError(t, err)
	require.Contains(t, sql, `CREATE TABLE IF NOT EXISTS "my""schema"."Keys"`)
	require.Contains(t, sql, `CREATE INDEX IF NOT EXISTS "Keys_expires_at_idx" ON "my""schema"."Keys"`)
}

func TestNewMissingTableSaysMigrate(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	pool, _ := pgtest.Postgres(t)
	s := requireMigrateFixes(t, ctx, pool, "does not exist")

	// A table dropped later gives the same advice from every call.
	_, err := pool.Exec(ctx, "DROP TABLE jobonce_keys")
	require.NoError(t, err)
	_, err = s.Claim(ctx, claimReq("k", time.Second))
	require.ErrorIs(t, err, pgstore.ErrNotMigrated)
	_, err = txOf(t, s).Do(ctx, "k", func(context.Context, pgx.Tx) error { return nil })
	require.ErrorIs(t, err, pgstore.ErrNotMigrated)
	require.ErrorIs(t, err, core.ErrStoreUnavailable)
}

func TestMigrateConcurrentlyWithSchemaAndTable(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	pool, schema := pgtest.Postgres(t)
	admin := pgtest.PostgresOn(t, "public", 8)
	cfg := &pgstore.Config{Schema: schema, Table: "Claims Table"}
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Go(func() { errs[i] = pgstore.Migrate(ctx, admin, cfg) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	// A pool whose search_path does not include the schema still finds it.
	s, err := pgstore.New(ctx, admin, cfg)
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf(`"%s"."Claims Table"`, schema), s.Table())
	r, err := s.Claim(ctx, claimReq("k", time.Minute))
	require.NoError(t, err)
	require.Equal(t, driver.StateClaimed, r.State)
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM "Claims Table"`))
}

func TestClaimLifecycle(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, _ := newStore(t, nil)

	first := driver.ClaimRequest{Key: "job", Token: driver.NewToken(), Fingerprint: "fp-1", Lease: time.Minute}
	r, err := s.Claim(ctx, first)
	require.NoError(t, err)
	require.Equal(t, driver.StateClaimed, r.State)
	require.Positive(t, r.Fence)

	second := driver.ClaimRequest{Key: "job", Token: driver.NewToken(), Fingerprint: "fp-2", Lease: time.Minute}
	r, err = s.Claim(ctx, second)
	require.NoError(t, err)
	require.Equal(t, driver.StateRunning, r.State)
	require.Equal(t, "fp-1", r.Fingerprint)
	require.InDelta(t, time.Minute, r.Remaining, float64(5*time.Second))

	// Only the holder's token counts.
	require.ErrorIs(t, s.Extend(ctx, "job", second.Token, time.Minute), core.ErrLeaseLost)
	require.ErrorIs(t, s.Release(ctx, "job", second.Token), core.ErrLeaseLost)
	require.ErrorIs(t, s.Complete(ctx, driver.CompleteRequest{Key: "job", Token: second.Token, Retention: time.Hour}), core.ErrLeaseLost)
	require.ErrorIs(t, s.Extend(ctx, "other", first.Token, time.Minute), core.ErrLeaseLost)
	require.NoError(t, s.Extend(ctx, "job", first.Token, 2*time.Minute))

	result := []byte{0, 1, 2, 0xff}
	require.NoError(t, s.Complete(ctx, driver.CompleteRequest{Key: "job", Token: first.Token, Fingerprint: "fp-1", Result: result, Retention: time.Hour}))

	r, err = s.Claim(ctx, second)
	require.NoError(t, err)
	require.InDelta(t, time.Hour, r.Remaining, float64(5*time.Second), "a done row reports its remaining retention")
	require.Equal(t, driver.ClaimReply{State: driver.StateDone, Fingerprint: "fp-1", Result: result, Remaining: r.Remaining}, r)

	// A done row has no token: nothing can extend, complete or release it.
	require.ErrorIs(t, s.Extend(ctx, "job", first.Token, time.Minute), core.ErrLeaseLost)
	require.ErrorIs(t, s.Release(ctx, "job", first.Token), core.ErrLeaseLost)
	require.ErrorIs(t, s.Complete(ctx, driver.CompleteRequest{Key: "job", Token: first.Token, Retention: time.Hour}), core.ErrLeaseLost)
}

func TestReleaseFreesKey(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, _ := newStore(t, nil)
	a := claimReq("k", time.Minute)
	_, err := s.Claim(ctx, a)
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, "k", a.Token))
	require.ErrorIs(t, s.Release(ctx, "k", a.Token), core.ErrLeaseLost)
	r, err := s.Claim(ctx, claimReq("k", time.Minute))
	require.NoError(t, err)
	require.Equal(t, driver.StateClaimed, r.State)
}

func TestClaimRejectsNonPositiveDurations(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, _ := newStore(t, nil)
	_, err := s.Claim(ctx, claimReq("k", 0))
	require.ErrorContains(t, err, "ClaimRequest.Lease must be at least 1ms")
	require.ErrorContains(t, s.Extend(ctx, "k", driver.NewToken(), -time.Second), "Extend lease must be at least 1ms")
	require.ErrorContains(t, s.Complete(ctx, driver.CompleteRequest{Key: "k"}), "CompleteRequest.Retention must be at least 1ms")
}

// TestDeadlinesUseDatabaseClock checks that leases and remaining times come
// from the database: the row's expires_at is set on the server's clock, and a
// deadline moved in the database (not on the worker) decides the state.
func TestDeadlinesUseDatabaseClock(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, pool := newStore(t, nil)

	a := claimReq("k", 90*time.Second)
	_, err := s.Claim(ctx, a)
	require.NoError(t, err)
	var leftMs float64
	require.NoError(t, pool.QueryRow(ctx,
		"SELECT extract(epoch FROM expires_at - clock_timestamp()) * 1000 FROM jobonce_keys WHERE key = $1", []byte("k")).Scan(&leftMs))
	require.InDelta(t, 90_000, leftMs, 2_000)

	// The remaining lease a rival sees is computed from the row in SQL.
	_, err = pool.Exec(ctx, "UPDATE jobonce_keys SET expires_at = clock_timestamp() + interval '1 hour'")
	require.NoError(t, err)
	r, err := s.Claim(ctx, claimReq("k", time.Second))
	require.NoError(t, err)
	require.Equal(t, driver.StateRunning, r.State)
	require.InDelta(t, time.Hour, r.Remaining, float64(5*time.Second))

	// The lease ends when the database clock passes it, whatever the worker thinks.
	_, err = pool.Exec(ctx, "UPDATE jobonce_keys SET expires_at = clock_timestamp() - interval '1 millisecond'")
	require.NoError(t, err)
	require.ErrorIs(t, s.Extend(ctx, "k", a.Token, time.Minute), core.ErrLeaseLost)
	b := claimReq("k", time.Minute)
	r, err = s.Claim(ctx, b)
	require.NoError(t, err)
	require.Equal(t, driver.StateClaimed, r.State, "an expired claim is taken over")
	require.ErrorIs(t, s.Complete(ctx, driver.CompleteRequest{Key: "k", Token: a.Token, Retention: time.Hour}), core.ErrLeaseLost)

	// A short lease lapses on its own.
	c := claimReq("short", 50*time.Millisecond)
	_, err = s.Claim(ctx, c)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		r, err := s.Claim(ctx, claimReq("short", time.Minute))
		return err == nil && r.State == driver.StateClaimed
	}, 5*time.Second, 10*time.Millisecond)
	require.ErrorIs(t, s.Release(ctx, "short", c.Token), core.ErrLeaseLost)

	// A done row is kept for its retention, then the key is free again. A
	// claim answered within the retention of the complete's start must read
	// the marker; one a loaded machine delayed past it proves nothing, and
	// the round is tried again with twice the retention.
	for retention, round := 50*time.Millisecond, 0; ; retention, round = 2*retention, round+1 {
		require.Less(t, round, 8, "no claim came within the retention of its marker")
		key := fmt.Sprint("done-", round)
		d := claimReq(key, time.Minute)
		_, err = s.Claim(ctx, d)
		require.NoError(t, err)
		began := time.Now()
		require.NoError(t, s.Complete(ctx, driver.CompleteRequest{Key: key, Token: d.Token, Retention: retention}))
		r, err = s.Claim(ctx, claimReq(key, time.Minute))
		require.NoError(t, err)
		if time.Since(began) >= retention {
			continue
		}
		require.Equal(t, driver.StateDone, r.State)
		require.Eventually(t, func() bool {
			r, err := s.Claim(ctx, claimReq(key, time.Minute))
			return err == nil && r.State == driver.StateClaimed
		}, 5*time.Second+retention, 10*time.Millisecond)
		return
	}
}

func TestClaimRaceOneWinner(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	pool, schema := pgtest.Postgres(t)
	migratedStore(t, pool, nil)
	s := migratedStore(t, pgtest.PostgresOn(t, schema, 16), nil)
	for round := range 20 {
		key := fmt.Sprintf("race-%d", round)
		if round%2 == 1 { // a takeover race: the key's row has expired
			_, err := pool.Exec(ctx, "INSERT INTO jobonce_keys (key, token, expires_at) VALUES ($1, $2, clock_timestamp() - interval '1 second')",
				[]byte(key), driver.NewToken().String())
			require.NoError(t, err)
		}
		var wg sync.WaitGroup
		states := make([]driver.State, 16)
		errs := make([]error, 16)
		for i := range states {
			wg.Go(func() {
				r, err := s.Claim(ctx, claimReq(key, time.Minute))
				states[i], errs[i] = r.State, err
			})
		}
		wg.Wait()
		won := 0
		for i := range states {
			require.NoError(t, errs[i])
			if states[i] == driver.StateClaimed {
				won++
			} else {
				require.Equal(t, driver.StateRunning, states[i])
			}
		}
		require.Equal(t, 1, won, "round %d", round)
	}
}

// TestClaimsAreAnsweredAlikeUnderEveryIsolationDefault: concurrent claims
// of a key, alone and in batches, on connections that default to each
// isolation level, are answered without an error, with one winner, and
// see the key done once its claim completes.
func TestClaimsAreAnsweredAlikeUnderEveryIsolationDefault(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	pool, schema := pgtest.Postgres(t)
	migratedStore(t, pool, nil)
	for _, level := range isolationDefaults {
		s := migratedStore(t, isolationPool(t, schema, level, 16), nil)
		for round := range 20 {
			key := fmt.Sprintf("%s-%d", level, round)
			var mu sync.Mutex
			var won []driver.ClaimRequest
			var wg sync.WaitGroup
			claim := func(i int) {
				req := claimReq(key, time.Minute)
				var r driver.ClaimReply
				var err error
				if i%2 == 0 {
					r, err = s.Claim(ctx, req)
				} else {
					replies, errs := batchcall.Claims(ctx, s, []driver.ClaimRequest{req, claimReq(key+"-other", time.Minute)})
					r, err = replies[0], errs[0]
				}
				require.NoError(t, err, "%s: a claim of a key another copy claims or completes", level)
				if r.State == driver.StateClaimed {
					mu.Lock()
					won = append(won, req)
					mu.Unlock()
					require.NoError(t, s.Complete(ctx, driver.CompleteRequest{Key: key, Token: req.Token, Retention: time.Hour, Fence: r.Fence}))
				}
			}
			for i := range 16 {
				wg.Go(func() { claim(i) })
			}
			wg.Wait()
			require.Len(t, won, 1, "%s round %d", level, round)
			r, err := s.Claim(ctx, claimReq(key, time.Minute))
			require.NoError(t, err)
			require.Equal(t, driver.StateDone, r.State)
		}
	}
}

// TestGuardRunsEachKeyOnceUnderEveryIsolationDefault: 100 keys, each
// delivered to 4 concurrent copies that are delivered again while they get
// Running, on connections that default to each isolation level, with and
// without FailOpen: every key runs once and its other copies are
// duplicates; none is unavailable or unguarded.
func TestGuardRunsEachKeyOnceUnderEveryIsolationDefault(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.Postgres(t)
	migratedStore(t, pool, nil)
	for _, level := range isolationDefaults {
		s := migratedStore(t, isolationPool(t, schema, level, 16), nil)
		for _, failOpen := range []bool{false, true} {
			ctx := ctxT(t)
			g, err := core.New(s, &core.Config{FailOpen: failOpen, KeyPrefix: fmt.Sprintf("%s:%v:", level, failOpen)})
			require.NoError(t, err)
			const keys, copies = 100, 4
			var effects [keys]atomic.Int32
			var outcomes [core.Canceled + 1]atomic.Int32
			start := make(chan struct{})
			var wg sync.WaitGroup
			for k := range keys {
				for range copies {
					wg.Go(func() {
						<-start
						// Delivered again while another copy runs it, until
						// it settles: by count, a loaded machine could use
						// up the deliveries before the running copy ends.
						for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
							out, _ := g.Do(ctx, fmt.Sprint("key-", k), func(context.Context) error {
								effects[k].Add(1)
								return nil
							})
							outcomes[out].Add(1)
							if out != core.Running {
								return
							}
						}
					})
				}
			}
			close(start)
			wg.Wait()
			var counts []string
			for out := range outcomes {
				if n := outcomes[out].Load(); n > 0 {
					counts = append(counts, fmt.Sprintf("%s %d", core.Outcome(out), n))
				}
			}
			t.Logf("%s, FailOpen %v: %s", level, failOpen, strings.Join(counts, ", "))
			for k := range effects {
				require.EqualValues(t, 1, effects[k].Load(), "%s, FailOpen %v: effects of key-%d", level, failOpen, k)
			}
			require.EqualValues(t, keys, outcomes[core.Ran].Load(), "%s, FailOpen %v: %v", level, failOpen, counts)
			require.EqualValues(t, keys*(copies-1), outcomes[core.Duplicate].Load(), "%s, FailOpen %v: %v", level, failOpen, counts)
		}
	}
}

func TestKeysAreBytes(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, _ := newStore(t, nil)
	g, err := core.New(s, &core.Config{PlainKeys: true}) // the bytes reach the table as they are
	require.NoError(t, err)
	keys := []string{"a\x00b", "\xff\xfe", "a\x00c", strings.Repeat("long", 100), strings.Repeat("long", 100) + "x"}
	for _, key := range keys {
		out, err := g.Do(ctx, key, func(context.Context) error { return nil })
		require.NoError(t, err)
		require.Equal(t, core.Ran, out, "%q", key)
	}
	for _, key := range keys {
		out, err := g.Do(ctx, key, func(context.Context) error { return nil })
		require.NoError(t, err)
		require.Equal(t, core.Duplicate, out, "%q", key)
	}
	out, err := g.Do(ctx, "", func(context.Context) error { return nil })
	require.ErrorIs(t, err, core.ErrInvalidKey)
	require.Equal(t, core.Rejected, out)
}

func TestGuardOnPostgres(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, _ := newStore(t, nil)
	g, err := core.New(s, &core.Config{Lease: 2 * time.Second})
	require.NoError(t, err)

	boom := errors.New("boom")
	out, err := g.Do(ctx, "job", func(context.Context) error { return boom })
	require.ErrorIs(t, err, boom)
	require.Equal(t, core.Failed, out)

	res, err := g.Run(ctx, core.Job{Key: "job", Fingerprint: "f"}, func(context.Context) ([]byte, error) { return []byte("answer"), nil })
	require.NoError(t, err)
	require.Equal(t, core.Ran, res.Outcome)

	res, err = g.Run(ctx, core.Job{Key: "job", Fingerprint: "f"}, func(context.Context) ([]byte, error) { return nil, boom })
	require.NoError(t, err)
	require.Equal(t, core.Result{Outcome: core.Duplicate, Value: []byte("answer")}, res)

	_, err = g.Run(ctx, core.Job{Key: "job", Fingerprint: "g"}, func(context.Context) ([]byte, error) { return nil, nil })
	require.ErrorIs(t, err, core.ErrConflict)

	// A job longer than the lease keeps its claim through the heartbeat.
	started := make(chan struct{})
	finish := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		out, err := g.Do(ctx, "long", func(ctx context.Context) error {
			close(started)
			select {
			case <-finish:
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})
		require.NoError(t, err)
		require.Equal(t, core.Ran, out)
	})
	<-started
	deadline := time.Now().Add(4 * time.Second) // two leases
	for time.Now().Before(deadline) {
		out, err := g.Do(ctx, "long", func(context.Context) error { return nil })
		require.ErrorIs(t, err, core.ErrRunning)
		require.Equal(t, core.Running, out)
		time.Sleep(100 * time.Millisecond) // pacing of the probe, not synchronisation
	}
	close(finish)
	wg.Wait()
}

func TestBatch(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, _ := newStore(t, nil)

	held := claimReq("held", time.Minute)
	_, err := s.Claim(ctx, held)
	require.NoError(t, err)
	done := claimReq("done", time.Minute)
	_, err = s.Claim(ctx, done)
	require.NoError(t, err)
	require.NoError(t, s.Complete(ctx, driver.CompleteRequest{Key: "done", Token: done.Token, Result: []byte("r"), Retention: time.Hour}))

	reqs := []driver.ClaimRequest{
		claimReq("new-b", time.Minute),
		claimReq("held", time.Minute),
		claimReq("new-a", time.Minute),
		claimReq("done", time.Minute),
		claimReq("new-a", time.Minute), // the same key twice in one batch
		claimReq("bad", 0),
	}
	replies, errs := batchcall.Claims(ctx, s, reqs)
	require.Len(t, replies, len(reqs))
	for i := range 5 {
		require.NoError(t, errs[i], i)
	}
	require.ErrorContains(t, errs[5], "ClaimRequest.Lease must be at least 1ms")
	require.Equal(t, driver.StateClaimed, replies[0].State)
	require.Equal(t, driver.StateRunning, replies[1].State)
	require.Equal(t, driver.StateClaimed, replies[2].State)
	require.InDelta(t, time.Hour, replies[3].Remaining, float64(5*time.Second))
	require.Equal(t, driver.ClaimReply{State: driver.StateDone, Result: []byte("r"), Fingerprint: "", Remaining: replies[3].Remaining}, replies[3])
	require.Equal(t, driver.StateRunning, replies[4].State)

	cerrs := batchcall.Completes(ctx, s, []driver.CompleteRequest{
		{Key: "new-a", Token: reqs[2].Token, Result: []byte("a"), Retention: time.Hour},
		{Key: "new-b", Token: reqs[4].Token, Retention: time.Hour}, // wrong token
		{Key: "new-b", Token: reqs[0].Token, Result: []byte("b"), Retention: time.Hour},
		{Key: "x", Token: reqs[0].Token},
	})
	require.NoError(t, cerrs[0])
	require.ErrorIs(t, cerrs[1], core.ErrLeaseLost)
	require.NoError(t, cerrs[2])
	require.ErrorContains(t, cerrs[3], "CompleteRequest.Retention must be at least 1ms")

	replies, errs = batchcall.Claims(ctx, s, []driver.ClaimRequest{claimReq("new-a", time.Minute), claimReq("new-b", time.Minute)})
	require.NoError(t, errors.Join(errs...))
	require.Equal(t, []byte("a"), replies[0].Result)
	require.Equal(t, []byte("b"), replies[1].Result)
}

// TestBatchesDoNotDeadlock runs overlapping batches in opposite key orders:
// every key is claimed exactly once and no batch fails.
func TestBatchesDoNotDeadlock(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	pool, schema := pgtest.Postgres(t)
	migratedStore(t, pool, nil)
	s := migratedStore(t, pgtest.PostgresOn(t, schema, 8), nil)
	const keys = 60
	var mu sync.Mutex
	claimed := map[string]int{}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for round := range 5 {
				reqs := make([]driver.ClaimRequest, 0, 10)
				for j := range 10 {
					k := (round*10 + j) % keys
					if w%2 == 1 {
						k = keys - 1 - k
					}
					reqs = append(reqs, claimReq(fmt.Sprintf("k%02d", k), time.Minute))
				}
				replies, errs := batchcall.Claims(ctx, s, reqs)
				mu.Lock()
				for i := range reqs {
					require.NoError(t, errs[i])
					if replies[i].State == driver.StateClaimed {
						claimed[reqs[i].Key]++
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Len(t, claimed, keys)
	for k, n := range claimed {
		require.Equal(t, 1, n, k)
	}
}

// TestLiveRowsAnswerWithoutLocks: a claim of a done or running key reads
// the row without waiting for its lock, so duplicates never queue behind a
// transaction that happens to hold it, and cost no write.
func TestLiveRowsAnswerWithoutLocks(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s, pool := newStore(t, &pgstore.Config{LockTimeout: 20 * time.Second})
	done := claimReq("done", time.Minute)
	_, err := s.Claim(ctx, done)
	require.NoError(t, err)
	require.NoError(t, s.Complete(ctx, driver.CompleteRequest{Key: "done", Token: done.Token, Retention: time.Hour}))
	_, err = s.Claim(ctx, claimReq("running", time.Minute))
	require.NoError(t, err)

	locker, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer locker.Rollback(ctx)
	_, err = locker.Exec(ctx, "SELECT FROM jobonce_keys FOR UPDATE")
	require.NoError(t, err)

	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := s.Claim(qctx, claimReq("done", time.Minute))
	require.NoError(t, err)
	require.Equal(t, driver.StateDone, r.State)
	r, err = s.Claim(qctx, claimReq("running", time.Minute))
	require.NoError(t, err)
	require.Equal(t, driver.StateRunning, r.State)
	replies, errs := batchcall.Claims(qctx, s, []driver.ClaimRequest{claimReq("done", time.Minute), claimReq("running", time.Minute)})
	require.NoError(t, errors.Join(errs...))
	require.Equal(t, driver.StateDone, replies[0].State)
	require.Equal(t, driver.StateRunning, replies[1].State)

	var xid *int64
	tx, err := pool.Begin(qctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	key, err := txOf(t, s).StoredKey("dup")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "INSERT INTO jobonce_keys (key, expires_at) VALUES ($1, clock_timestamp() + interval '1 hour')", []byte(key))
	require.NoError(t, err)
	_, err = locker.Exec(ctx, "SELECT FROM jobonce_keys WHERE key = $1 FOR UPDATE", []byte(key))
	require.NoError(t, err)
	reply, err := s.RecordTx(qctx, tx, driver.RecordRequest{Key: key, Retention: time.Hour})
	require.NoError(t, err)
	require.Equal(t, driver.StateDone, reply.State)
	require.NoError(t, tx.QueryRow(qctx, "SELECT pg_current_xact_id_if_assigned()::text::bigint").Scan(&xid))
	require.Nil(t, xid, "recording a done key writes nothing")
}

// New reads the table, so a database it cannot reach is its error.
func TestNewFailsWhenItCannotReachTheDatabase(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=5")
	require.NoError(t, err, "a pool connects lazily")
	t.Cleanup(pool.Close)
	_, err = pgstore.New(ctxT(t), pool, nil)
	require.ErrorContains(t, err, `jobonce: pgstore: New: checking table "jobonce_keys"`)
	require.ErrorContains(t, err, "connection refused")
}
