package riveronce

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/internal/jobkey"
	"github.com/jobonce/jobonce/internal/testenv"
)

type keyedArgs struct {
	User string `json:"user"`
}

func (keyedArgs) Kind() string { return "welcome_email" }

func (a keyedArgs) OnceKey() string { return "email:welcome:" + a.User }

func row(id int64, kind, args string) *rivertype.JobRow {
	return &rivertype.JobRow{ID: id, Kind: kind, EncodedArgs: []byte(args), Metadata: []byte(`{}`), State: rivertype.JobStateRunning}
}

func TestDefaultKey(t *testing.T) {
	t.Parallel()
	var cfg Config
	job := keyed(cfg.job(row(1, "sort", `{"n":1}`), nil))
	fp := core.Fingerprint([]byte(`{"n":1}`))
	require.Equal(t, core.Job{Key: "sort:" + fp, Kind: "sort", Source: "river", DefaultKey: true, KeyHint: keyHint}, job, "the key holds the fingerprint")
	require.Equal(t, job, keyed(cfg.job(row(2, "sort", `{"n":1}`), nil)), "copies share the key")
	require.NotEqual(t, job.Key, keyed(cfg.job(row(1, "sort", `{"n":2}`), nil)).Key)
	require.NotEqual(t, job.Key, keyed(cfg.job(row(1, "other", `{"n":1}`), nil)).Key)
}

func TestKeyPrecedence(t *testing.T) {
	t.Parallel()
	r := row(1, "welcome_email", `{"user":"42"}`)
	r.Metadata = []byte(`{"jobonce_key":"from-metadata"}`)

	var plain Config
	require.Equal(t, "email:welcome:42", keyed(plain.job(r, keyedArgs{User: "42"})).Key, "Keyer args first")
	require.Equal(t, "from-metadata", keyed(plain.job(r, nil)).Key, "then the key recorded at insert")

	require.Equal(t, core.Fingerprint([]byte(`{"user":"42"}`)), keyed(plain.job(r, nil)).Fingerprint)

	custom := Config{Key: func(job *rivertype.JobRow) string { return "custom" }}
	require.Equal(t, "custom", keyed(custom.job(r, keyedArgs{User: "42"})).Key, "Config.Key above all")
	empty := Config{Key: func(*rivertype.JobRow) string { return "" }}
	require.Empty(t, keyed(empty.job(r, keyedArgs{User: "42"})).Key, "an empty Config.Key stays empty (and cancels the job)")

	noCheck := Config{Fingerprint: func(*rivertype.JobRow) string { return "" }}
	job := keyed(noCheck.job(row(1, "k", `{}`), nil))
	require.Equal(t, "k:"+core.Fingerprint([]byte(`{}`)), job.Key)
	require.Empty(t, job.Fingerprint)
}

func TestInsertRecordsKeyerKey(t *testing.T) {
	t.Parallel()
	mw := MustMiddleware(testenv.MemGuard(t, nil), nil).(rivertype.JobInsertMiddleware)
	keyed := &rivertype.JobInsertParams{Args: keyedArgs{User: "7"}, Kind: "welcome_email", Metadata: []byte(`{"tenant":"a"}`)}
	plain := &rivertype.JobInsertParams{Args: noopArgs{N: 1}, Kind: "riveronce_noop", Metadata: []byte(`{"tenant":"b"}`)}
	called := false
	_, err := mw.InsertMany(context.Background(), []*rivertype.JobInsertParams{keyed, plain},
		func(context.Context) ([]*rivertype.JobInsertResult, error) { called = true; return nil, nil })
	require.NoError(t, err)
	require.True(t, called)
	var md map[string]string
	require.NoError(t, json.Unmarshal(keyed.Metadata, &md))
	require.Equal(t, map[string]string{"tenant": "a", MetadataKey: "email:welcome:7"}, md)
	require.JSONEq(t, `{"tenant":"b"}`, string(plain.Metadata), "args without OnceKey are left alone")
	key, ok := jobkey.RiverMetadataKey(keyed.Metadata)
	require.True(t, ok)
	require.Equal(t, "email:welcome:7", key)

	bad := &rivertype.JobInsertParams{Args: keyedArgs{User: "7"}, Kind: "welcome_email", Metadata: []byte(`[1]`)}
	_, err = mw.InsertMany(context.Background(), []*rivertype.JobInsertParams{bad},
		func(context.Context) ([]*rivertype.JobInsertResult, error) { t.Fatal("inserted"); return nil, nil })
	require.ErrorContains(t, err, `job of kind "welcome_email": metadata is not a JSON object`)
}

// count returns a doInner that counts its runs.
func count(n *atomic.Int32) func(context.Context) error {
	return func(context.Context) error { n.Add(1); return nil }
}

func TestMiddlewareOutcomes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("RanThenDuplicate", func(t *testing.T) {
		t.Parallel()
		mw := MustMiddleware(testenv.MemGuard(t, nil), nil)
		var runs atomic.Int32
		require.NoError(t, mw.Work(ctx, row(1, "k", `{"n":1}`), count(&runs)))
		require.NoError(t, mw.Work(ctx, row(2, "k", `{"n":1}`), count(&runs)), "a duplicate completes")
		require.EqualValues(t, 1, runs.Load())
	})

	t.Run("RunningWaitsThenIsADuplicate", func(t *testing.T) {
		t.Parallel()
		var outs testenv.Outcomes
		mw := MustMiddleware(testenv.MemGuard(t, &core.Config{Observer: outs.Observe}), nil)
		started, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- mw.Work(ctx, row(1, "k", `{}`), func(context.Context) error {
				close(started)
				<-release
				return nil
			})
		}()
		<-started
		var runs atomic.Int32
		second := make(chan error, 1)
		go func() { second <- mw.Work(ctx, row(2, "k", `{}`), count(&runs)) }()
		select {
		case err := <-second:
			t.Fatalf("the second copy should wait in its slot, returned %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		close(release)
		require.NoError(t, <-done)
		require.NoError(t, <-second, "it completes as a duplicate, not snoozed")
		require.Zero(t, runs.Load())
		require.EqualValues(t, 1, outs.Get(core.Duplicate))
		for _, e := range outs.Events() {
			if e.Outcome == core.Duplicate {
				require.Positive(t, e.Waited, "the duplicate says how long it waited")
			}
		}
	})

	t.Run("RunningSnoozes", func(t *testing.T) {
		t.Parallel()
		mw := MustMiddleware(testenv.MemGuard(t, nil), &Config{WaitRunning: -1})
		started, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- mw.Work(ctx, row(1, "k", `{}`), func(context.Context) error {
				close(started)
				<-release
				return nil
			})
		}()
		<-started
		var runs atomic.Int32
		err := mw.Work(ctx, row(2, "k", `{}`), count(&runs))
		var snooze *river.JobSnoozeError
		require.ErrorAs(t, err, &snooze)
		require.Positive(t, snooze.Duration)
		require.Zero(t, runs.Load())
		close(release)
		require.NoError(t, <-done)
	})

	t.Run("ConflictCancels", func(t *testing.T) {
		t.Parallel()
		mw := MustMiddleware(testenv.MemGuard(t, nil), &Config{Key: func(*rivertype.JobRow) string { return "same" }})
		var runs atomic.Int32
		require.NoError(t, mw.Work(ctx, row(1, "k", `{"n":1}`), count(&runs)))
		err := mw.Work(ctx, row(2, "k", `{"n":2}`), count(&runs))
		var cancel *river.JobCancelError
		require.ErrorAs(t, err, &cancel)
		require.ErrorIs(t, err, core.ErrConflict)
		require.EqualValues(t, 1, runs.Load())
	})

	t.Run("EmptyKeyCancels", func(t *testing.T) {
		t.Parallel()
		mw := MustMiddleware(testenv.MemGuard(t, nil), &Config{Key: func(*rivertype.JobRow) string { return "" }})
		var runs atomic.Int32
		err := mw.Work(ctx, row(1, "k", `{}`), count(&runs))
		var cancel *river.JobCancelError
		require.ErrorAs(t, err, &cancel)
		require.ErrorIs(t, err, core.ErrInvalidKey)
		require.ErrorContains(t, err, `job 1 (kind "k")`)
		require.Zero(t, runs.Load())
	})

	t.Run("ErrorReleasesAndPassesThrough", func(t *testing.T) {
		t.Parallel()
		mw := MustMiddleware(testenv.MemGuard(t, nil), nil)
		boom := errors.New("boom")
		err := mw.Work(ctx, row(1, "k", `{}`), func(context.Context) error { return boom })
		require.Same(t, boom, err, "the worker's error reaches River unchanged")
		var runs atomic.Int32
		require.NoError(t, mw.Work(ctx, row(1, "k", `{}`), count(&runs)), "the retry claims at once")
		require.EqualValues(t, 1, runs.Load())
	})

	t.Run("StoreDownFailsClosed", func(t *testing.T) {
		t.Parallel()
		g, err := core.New(downStore{}, &core.Config{Logger: discardLogger()})
		require.NoError(t, err)
		var runs atomic.Int32
		err = MustMiddleware(g, nil).Work(ctx, row(1, "k", `{}`), count(&runs))
		require.ErrorIs(t, err, core.ErrStoreUnavailable)
		var snooze *river.JobSnoozeError
		var cancel *river.JobCancelError
		require.False(t, errors.As(err, &snooze) || errors.As(err, &cancel), "an ordinary error: River retries")
		require.Zero(t, runs.Load())
	})

	t.Run("Unguarded", func(t *testing.T) {
		t.Parallel()
		var outs testenv.Outcomes
		mw := MustMiddleware(testenv.MemGuard(t, &core.Config{Observer: outs.Observe}), &Config{Unguarded: func(job *rivertype.JobRow) bool { return job.Kind == "free" }})
		var runs atomic.Int32
		require.NoError(t, mw.Work(ctx, row(1, "free", `{}`), count(&runs)))
		require.NoError(t, mw.Work(ctx, row(2, "free", `{}`), count(&runs)))
		require.EqualValues(t, 2, runs.Load())
		require.EqualValues(t, 2, outs.Get(core.Unguarded), "skipped jobs are reported as Unguarded")
		err := mw.Work(ctx, row(3, "free", `{}`), func(ctx context.Context) error {
			_, ok := core.IdempotencyKey(ctx)
			require.False(t, ok, "a skipped job has no key, so no idempotency key")
			return nil
		})
		require.NoError(t, err)
	})

	t.Run("WrapInsideMiddlewareClaimsOnce", func(t *testing.T) {
		t.Parallel()
		g := testenv.MemGuard(t, nil)
		var runs atomic.Int32
		w := MustWrap[noopArgs](g, river.WorkFunc(func(context.Context, *river.Job[noopArgs]) error {
			runs.Add(1)
			return nil
		}), nil)
		r := row(1, "riveronce_noop", `{"n":1}`)
		err := MustMiddleware(g, nil).Work(ctx, r, func(ctx context.Context) error {
			return w.Work(ctx, &river.Job[noopArgs]{JobRow: r, Args: noopArgs{N: 1}})
		})
		require.NoError(t, err)
		require.EqualValues(t, 1, runs.Load())
	})
}

// downStore is a store that cannot be reached.
type downStore struct{}

var errDown = errors.New("connection refused")

func (downStore) Claim(context.Context, driver.ClaimRequest) (driver.ClaimReply, error) {
	return driver.ClaimReply{}, errDown
}
func (downStore) Extend(context.Context, string, driver.Token, time.Duration) error { return errDown }
func (downStore) Complete(context.Context, driver.CompleteRequest) error            { return errDown }
func (downStore) Release(context.Context, string, driver.Token) error               { return errDown }

// tunedWorker overrides every Worker method but Work.
type tunedWorker struct {
	river.WorkerDefaults[noopArgs]
	mw []rivertype.WorkerMiddleware
}

var retryAt = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func (w *tunedWorker) Middleware(*rivertype.JobRow) []rivertype.WorkerMiddleware { return w.mw }
func (w *tunedWorker) NextRetry(*river.Job[noopArgs]) time.Time                  { return retryAt }
func (w *tunedWorker) Timeout(*river.Job[noopArgs]) time.Duration                { return 7 * time.Second }
func (w *tunedWorker) Work(context.Context, *river.Job[noopArgs]) error          { return nil }

func TestWrapPassesThrough(t *testing.T) {
	t.Parallel()
	inner := &tunedWorker{mw: []rivertype.WorkerMiddleware{&river.WorkerMiddlewareDefaults{}}}
	job := &river.Job[noopArgs]{JobRow: row(1, "riveronce_noop", `{}`)}
	for name, w := range map[string]river.Worker[noopArgs]{
		"Wrap":   MustWrap[noopArgs](testenv.MemGuard(t, nil), inner, nil),
		"WrapTx": MustWrapTx[noopArgs](fakeTxGuard(t), txTuned{inner}, nil),
	} {
		require.Equal(t, 7*time.Second, w.Timeout(job), name)
		require.Equal(t, retryAt, w.NextRetry(job), name)
		require.Equal(t, append([]rivertype.WorkerMiddleware{mark}, inner.mw...), w.Middleware(job.JobRow), name)
	}
}

// TestMisconfiguration: every constructor returns an error naming the
// problem, and its Must form panics with that error.
func TestMisconfiguration(t *testing.T) {
	t.Parallel()
	g, tg := testenv.MemGuard(t, nil), fakeTxGuard(t)
	unguarded := &Config{Unguarded: func(*rivertype.JobRow) bool { return true }}
	for _, c := range []struct {
		name string
		new  func() error
		must func()
		want string
	}{
		{"NewMiddleware", func() error { _, err := NewMiddleware(nil, nil); return err }, func() { MustMiddleware(nil, nil) }, "jobonce: riveronce: NewMiddleware: Guard is nil"},
		{"Wrap guard", func() error { _, err := Wrap[noopArgs](nil, &tunedWorker{}, nil); return err }, func() { MustWrap[noopArgs](nil, &tunedWorker{}, nil) }, "jobonce: riveronce: Wrap: Guard is nil"},
		{"Wrap worker", func() error { _, err := Wrap[noopArgs](g, nil, nil); return err }, func() { MustWrap[noopArgs](g, nil, nil) }, "jobonce: riveronce: Wrap: worker is nil"},
		{"WrapTx guard", func() error { _, err := WrapTx[noopArgs](nil, txTuned{}, nil); return err }, func() { MustWrapTx[noopArgs](nil, txTuned{}, nil) }, "jobonce: riveronce: WrapTx: TxGuard is nil"},
		{"WrapTx worker", func() error { _, err := WrapTx[noopArgs](tg, nil, nil); return err }, func() { MustWrapTx[noopArgs](tg, nil, nil) }, "jobonce: riveronce: WrapTx: worker is nil"},
		{"Wrap typed-nil worker", func() error { _, err := Wrap[noopArgs](g, (*tunedWorker)(nil), nil); return err }, func() { MustWrap[noopArgs](g, (*tunedWorker)(nil), nil) }, "jobonce: riveronce: Wrap: worker is nil"},
		{"WrapTx typed-nil worker", func() error { _, err := WrapTx[noopArgs](tg, (*txTuned)(nil), nil); return err }, func() { MustWrapTx[noopArgs](tg, (*txTuned)(nil), nil) }, "jobonce: riveronce: WrapTx: worker is nil"},
		{"WrapTx unguarded", func() error { _, err := WrapTx[noopArgs](tg, txTuned{}, unguarded); return err }, func() { MustWrapTx[noopArgs](tg, txTuned{}, unguarded) }, "jobonce: riveronce: WrapTx: Config.Unguarded is set: a transactional worker records every job it runs; give WrapTx a Config without it"},
	} {
		err := c.new()
		require.EqualError(t, err, c.want, c.name)
		require.PanicsWithError(t, c.want, c.must, c.name)
	}
	ctx, job := context.Background(), &river.Job[noopArgs]{JobRow: &rivertype.JobRow{Kind: "noop"}}
	fn := func(context.Context, pgx.Tx) error { return nil }
	require.EqualError(t, WorkTx(ctx, nil, job, fn), "jobonce: riveronce: WorkTx: TxGuard is nil")
	require.EqualError(t, WorkTx[noopArgs](ctx, tg, nil, fn), "jobonce: riveronce: WorkTx: job is nil")
	require.EqualError(t, WorkTx(ctx, tg, job, nil), "jobonce: riveronce: WorkTx: fn is nil")
}

// txTuned is tunedWorker as a TxWorker.
type txTuned struct{ *tunedWorker }

func (txTuned) WorkTx(context.Context, pgx.Tx, *river.Job[noopArgs]) error { return nil }

// fakeTxStore is a memstore with a transactional mode that is never
// called: enough to build a TxGuard for tests of construction alone.
type fakeTxStore struct{ *memstore.Store }

func (fakeTxStore) RecordTx(context.Context, pgx.Tx, driver.RecordRequest) (driver.ClaimReply, error) {
	panic("not called")
}
func (fakeTxStore) BeginTx(context.Context) (pgx.Tx, error)  { panic("not called") }
func (fakeTxStore) CommitTx(context.Context, pgx.Tx) error   { panic("not called") }
func (fakeTxStore) RollbackTx(context.Context, pgx.Tx) error { panic("not called") }

func fakeTxGuard(t testing.TB) *core.TxGuard[pgx.Tx] {
	g, err := core.New(fakeTxStore{memstore.New()}, nil)
	require.NoError(t, err)
	tg, err := core.NewTxGuard[pgx.Tx](g)
	require.NoError(t, err)
	return tg
}

// TestSkippedKindIsStillWrapped: a kind the middleware skips holds no
// claim, so a Wrap or WrapTx inside still guards it: the second copy is a
// duplicate, and the transactional form is not told it is guarded twice.
func TestSkippedKindIsStillWrapped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	skip := &Config{Unguarded: func(job *rivertype.JobRow) bool { return job.Kind == "riveronce_noop" }}
	mw := MustMiddleware(testenv.MemGuard(t, nil), skip)

	var runs atomic.Int32
	w := MustWrap[noopArgs](testenv.MemGuard(t, nil), river.WorkFunc(func(context.Context, *river.Job[noopArgs]) error {
		runs.Add(1)
		return nil
	}), nil)
	for id := int64(1); id <= 2; id++ {
		r := row(id, "riveronce_noop", `{"n":1}`)
		require.NoError(t, mw.Work(ctx, r, func(ctx context.Context) error {
			return w.Work(ctx, &river.Job[noopArgs]{JobRow: r, Args: noopArgs{N: 1}})
		}))
	}
	require.EqualValues(t, 1, runs.Load(), "the second copy is a duplicate")

	tx := MustWrapTx[noopArgs](fakeTxGuard(t), txTuned{&tunedWorker{}}, nil)
	r := row(3, "riveronce_noop", `{"n":3}`)
	err := mw.Work(ctx, r, func(ctx context.Context) error { return tx.Work(ctx, &river.Job[noopArgs]{JobRow: r}) })
	require.NotErrorIs(t, err, ErrGuardedTwice)
	require.ErrorIs(t, err, core.ErrStoreUnavailable, "it went on to begin its transaction (the fake store's BeginTx fails)")
}
