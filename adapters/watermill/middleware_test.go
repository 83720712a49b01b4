package watermillonce_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/stretchr/testify/require"

	watermillonce "github.com/jobonce/jobonce/adapters/watermill"
	"github.com/jobonce/jobonce/adapters/watermill/internal/watermilltest"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/testenv"
)

// These tests call the wrapped handler directly, as a router would, with
// the in-process store. Outside a router a message's context names no
// handler and no topic, so default keys start with "0::0::".

// TestKeyPolicy: the policy every adapter shares. An empty key is invalid:
// the handler does not run and the message goes to the poison path,
// reported as Rejected. A message Config.Unguarded exempts runs every time,
// reported as Unguarded.
func TestKeyPolicy(t *testing.T) {
	t.Parallel()
	withMetadata := func(payload string, kv ...string) func() *message.Message {
		return func() *message.Message {
			m := watermilltest.NewMessage(payload)
			for i := 0; i < len(kv); i += 2 {
				m.Metadata.Set(kv[i], kv[i+1])
			}
			return m
		}
	}
	for _, c := range []struct {
		name     string
		cfg      *watermillonce.Config
		msg      func() *message.Message // a new copy each delivery: another UUID
		runs     int64
		outcome  core.Outcome // reported …
		observed int64        // … this many times for the two deliveries
		key      string       // the key of every event
		rejected bool
	}{
		{"default key", nil, withMetadata("user-42"), 1, core.Duplicate, 1, "0::0::" + core.Fingerprint([]byte("user-42")), false},
		{"named key", watermilltest.KeyByID, withMetadata("user-42", "id", "1"), 1, core.Duplicate, 1, "0::1", false},
		{"empty key", watermilltest.KeyByID, withMetadata("user-42"), 0, core.Rejected, 2, "", true},
		{"skipped", watermilltest.KeyByID, withMetadata("user-42", "free", "1"), 2, core.Unguarded, 2, "", false},
	} {
		var outs testenv.Outcomes
		var runs atomic.Int64
		h := watermillonce.MustMiddleware(testenv.MemGuard(t, &core.Config{Observer: outs.Observe}), c.cfg)(
			func(*message.Message) ([]*message.Message, error) { runs.Add(1); return nil, nil })
		for range 2 {
			_, err := h(c.msg())
			if c.rejected {
				require.ErrorIs(t, err, core.ErrInvalidKey, c.name)
				require.True(t, watermillonce.IsPoison(err), c.name)
			} else {
				require.NoError(t, err, c.name)
			}
		}
		require.Equal(t, c.runs, runs.Load(), c.name)
		require.Equal(t, c.observed, outs.Get(c.outcome), c.name)
		for _, e := range outs.Events() {
			require.Equal(t, c.key, e.Key, c.name)
			require.Equal(t, "watermill", e.Source, c.name)
		}
	}
}

func TestMisconfiguration(t *testing.T) {
	t.Parallel()
	g := testenv.MemGuard(t, nil)
	pub := &watermilltest.CountingPublisher{}
	for _, c := range []struct {
		name string
		new  func() error
		must func() // nil: no Must form
		want string
	}{
		{"NewMiddleware guard", func() error { _, err := watermillonce.NewMiddleware(nil, nil); return err },
			func() { watermillonce.MustMiddleware(nil, nil) }, "jobonce: watermillonce: NewMiddleware: Guard is nil"},
		{"NewPublisher guard", func() error { _, err := watermillonce.NewPublisher(nil, pub, nil); return err }, nil,
			"jobonce: watermillonce: NewPublisher: Guard is nil"},
		{"NewPublisher publisher", func() error { _, err := watermillonce.NewPublisher(g, nil, nil); return err }, nil,
			"jobonce: watermillonce: NewPublisher: publisher is nil"},
		{"NewPublisher typed-nil publisher", func() error {
			_, err := watermillonce.NewPublisher(g, (*watermilltest.CountingPublisher)(nil), nil)
			return err
		}, nil,
			"jobonce: watermillonce: NewPublisher: publisher is nil"},
		{"Window", func() error {
			_, err := watermillonce.NewPublisher(g, pub, &watermillonce.PublisherConfig{Window: -time.Minute})
			return err
		}, nil, "jobonce: watermillonce: PublisherConfig.Window must be at least 1ms, got -1m0s"},
		{"Window below 1ms", func() error {
			_, err := watermillonce.NewPublisher(g, pub, &watermillonce.PublisherConfig{Window: time.Microsecond})
			return err
		}, nil, "jobonce: watermillonce: PublisherConfig.Window must be at least 1ms, got 1µs"},
	} {
		require.EqualError(t, c.new(), c.want, c.name)
		if c.must != nil {
			require.PanicsWithError(t, c.want, c.must, c.name)
		}
	}

	_, err := watermillonce.MustMiddleware(g, nil)(nil)(watermilltest.NewMessage("x"))
	require.EqualError(t, err, "jobonce: watermillonce: the middleware was given a nil handler")

	cfg, pcfg := &watermillonce.Config{}, &watermillonce.PublisherConfig{}
	watermillonce.MustMiddleware(g, cfg)
	_, err = watermillonce.NewPublisher(g, pub, pcfg)
	require.NoError(t, err)
	require.Equal(t, &watermillonce.Config{}, cfg, "defaults must not be written to the caller's Config")
	require.Equal(t, &watermillonce.PublisherConfig{}, pcfg, "defaults must not be written to the caller's PublisherConfig")
}

// The handler's error comes back unchanged, with the messages it returned,
// and releases the claim: the next delivery runs at once.
func TestHandlerErrorPassesThrough(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	var runs atomic.Int64
	h := watermillonce.MustMiddleware(testenv.MemGuard(t, nil), nil)(func(*message.Message) ([]*message.Message, error) {
		if runs.Add(1) == 1 {
			return []*message.Message{watermilltest.NewMessage("partial")}, boom
		}
		return nil, nil
	})
	out, err := h(watermilltest.NewMessage("flaky"))
	require.Same(t, boom, err)
	require.False(t, watermillonce.IsPoison(err))
	require.Len(t, out, 1)
	require.Equal(t, "partial", string(out[0].Payload))

	_, err = h(watermilltest.NewMessage("flaky"))
	require.NoError(t, err, "released: the redelivery runs")
	_, err = h(watermilltest.NewMessage("flaky"))
	require.NoError(t, err)
	require.EqualValues(t, 2, runs.Load())
}

// A panicking handler releases its claim and the panic goes on to the
// router (or Recoverer); the redelivery runs.
func TestPanicReleasesTheClaim(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	h := watermillonce.MustMiddleware(testenv.MemGuard(t, nil), nil)(func(*message.Message) ([]*message.Message, error) {
		if runs.Add(1) == 1 {
			panic("boom")
		}
		return nil, nil
	})
	require.PanicsWithValue(t, "boom", func() { _, _ = h(watermilltest.NewMessage("p")) })
	_, err := h(watermilltest.NewMessage("p"))
	require.NoError(t, err)
	require.EqualValues(t, 2, runs.Load())
}

// A duplicate returns the messages the run produced, with their UUIDs,
// metadata and payloads, so that the router publishes them again.
func TestDuplicateReturnsTheProducedMessages(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	var produced []*message.Message
	h := watermillonce.MustMiddleware(testenv.MemGuard(t, nil), nil)(func(*message.Message) ([]*message.Message, error) {
		runs.Add(1)
		a, b := watermilltest.NewMessage("receipt"), watermilltest.NewMessage("")
		a.Metadata.Set("correlation_id", "c-1")
		a.Metadata.Set("order", "o-7")
		produced = []*message.Message{a, b}
		return produced, nil
	})
	out, err := h(watermilltest.NewMessage("pay"))
	require.NoError(t, err)
	require.Equal(t, produced, out, "the run returns the handler's own messages")

	again, err := h(watermilltest.NewMessage("pay"))
	require.NoError(t, err)
	require.EqualValues(t, 1, runs.Load())
	require.Len(t, again, 2)
	for i := range again {
		require.True(t, produced[i].Equals(again[i]), "message %d: %v, want %v", i, again[i], produced[i])
		require.NotSame(t, produced[i], again[i])
	}
}

// The handler finds the job's idempotency key and fence in msg.Context(),
// and the message gets its own context back when the handler returns.
func TestJobContextReachesTheHandler(t *testing.T) {
	t.Parallel()
	g := testenv.MemGuard(t, nil)
	type seen struct {
		key   string
		fence int64
	}
	var got []seen
	h := watermillonce.MustMiddleware(g, nil)(func(msg *message.Message) ([]*message.Message, error) {
		key, ok := core.IdempotencyKey(msg.Context())
		require.True(t, ok)
		fence, ok := core.Fence(msg.Context())
		require.True(t, ok)
		got = append(got, seen{key, fence})
		return nil, errors.New("again")
	})
	type ctxKey struct{}
	for range 2 {
		msg := watermilltest.NewMessage("job")
		own := context.WithValue(context.Background(), ctxKey{}, "mine")
		msg.SetContext(own)
		_, err := h(msg)
		require.Error(t, err)
		require.Equal(t, own, msg.Context(), "the message's own context is restored")
	}
	require.Len(t, got, 2)
	require.Equal(t, got[0].key, got[1].key, "one idempotency key for every copy")
	require.Greater(t, got[1].fence, got[0].fence, "each claim has a larger fence")
}

// A different payload under a named key is a conflict: the handler does not
// run, and the error is for the poison queue.
func TestConflictIsPoison(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	h := watermillonce.MustMiddleware(testenv.MemGuard(t, nil), watermilltest.KeyByID)(func(*message.Message) ([]*message.Message, error) {
		runs.Add(1)
		return nil, nil
	})
	first, second := watermilltest.NewMessage("10 EUR"), watermilltest.NewMessage("99 EUR")
	first.Metadata.Set("id", "o-7")
	second.Metadata.Set("id", "o-7")
	_, err := h(first)
	require.NoError(t, err)
	_, err = h(second)
	require.ErrorIs(t, err, core.ErrConflict)
	require.True(t, watermillonce.IsPoison(err))
	require.ErrorContains(t, err, second.UUID)
	require.EqualValues(t, 1, runs.Load())

	require.False(t, watermillonce.IsPoison(core.ErrConflict), "only the middleware's verdict is poison")
	require.False(t, watermillonce.IsPoison(&core.RunningError{}))
	require.False(t, watermillonce.IsPoison(nil))
}

// Timeout inside the middleware cancels a handler that overruns it; the
// claim is released and the redelivery runs.
func TestTimeoutInsideReleasesTheClaim(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	h := watermillonce.MustMiddleware(testenv.MemGuard(t, nil), nil)(middleware.Timeout(50 * time.Millisecond)(
		func(msg *message.Message) ([]*message.Message, error) {
			if runs.Add(1) == 1 {
				<-msg.Context().Done()
				return nil, msg.Context().Err()
			}
			return nil, nil
		}))
	_, err := h(watermilltest.NewMessage("slow"))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = h(watermilltest.NewMessage("slow"))
	require.NoError(t, err)
	require.EqualValues(t, 2, runs.Load())
}

// A run that produced more than the Guard's MaxResultSize (100 messages of
// 1 KiB, over the default 64 KiB) returns its messages, but they are not
// stored: its duplicate cannot return them, so it is not acknowledged as if
// it had; it goes to the poison path, with an error matching
// ErrProducedNotStored.
func TestDuplicateOfARunWhoseProducedMessagesWereNotStoredIsPoison(t *testing.T) {
	t.Parallel()
	var logged strings.Builder
	var runs atomic.Int64
	h := watermillonce.MustMiddleware(testenv.MemGuard(t, &core.Config{Logger: slog.New(slog.NewTextHandler(&logged, nil))}), nil)(
		func(*message.Message) ([]*message.Message, error) {
			runs.Add(1)
			out := make([]*message.Message, 100)
			for i := range out {
				out[i] = watermilltest.NewMessage(strings.Repeat("x", 1024))
			}
			return out, nil
		})
	out, err := h(watermilltest.NewMessage("big"))
	require.NoError(t, err)
	require.Len(t, out, 100)
	require.Contains(t, logged.String(), "not stored")

	out, err = h(watermilltest.NewMessage("big"))
	require.ErrorIs(t, err, watermillonce.ErrProducedNotStored, "the duplicate was acknowledged with %d of 100 messages", len(out))
	require.True(t, watermillonce.IsPoison(err))
	require.Empty(t, out)
	require.EqualValues(t, 1, runs.Load())
}

// A run that produced no messages stores none: its duplicate is
// acknowledged.
func TestDuplicateOfARunThatProducedNothingIsAcknowledged(t *testing.T) {
	t.Parallel()
	h := watermillonce.MustMiddleware(testenv.MemGuard(t, nil), nil)(
		func(*message.Message) ([]*message.Message, error) { return nil, nil })
	for range 2 {
		out, err := h(watermilltest.NewMessage("quiet"))
		require.NoError(t, err)
		require.Empty(t, out)
	}
}

// A done marker whose result the middleware cannot read (another writer,
// an encoding of another release): the duplicate cannot return what the run
// produced, so it goes to the poison path, with a warning, rather than being
// acknowledged without them.
func TestUnreadableStoredResultIsPoison(t *testing.T) {
	t.Parallel()
	var logged strings.Builder
	g := testenv.MemGuard(t, &core.Config{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	res, err := g.Run(context.Background(), core.Job{Key: "0::0::" + core.Fingerprint([]byte("job"))}, func(context.Context) ([]byte, error) {
		return []byte("not produced messages"), nil
	})
	require.NoError(t, err)
	require.Equal(t, core.Ran, res.Outcome)

	h := watermillonce.MustMiddleware(g, nil)(func(*message.Message) ([]*message.Message, error) {
		t.Error("the job is done")
		return nil, nil
	})
	out, err := h(watermilltest.NewMessage("job"))
	require.ErrorIs(t, err, watermillonce.ErrProducedNotStored)
	require.True(t, watermillonce.IsPoison(err))
	require.Empty(t, out)
	require.Contains(t, logged.String(), "produced messages are not stored")
}
