package core_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/memstore"
)

func TestNewValidatesConfig(t *testing.T) {
	store := memstore.New()
	bad := []struct {
		cfg  core.Config
		want string
	}{
		{core.Config{Lease: -time.Second}, "Config.Lease"},
		{core.Config{Lease: time.Millisecond}, "Config.Lease"},
		{core.Config{Retention: -1}, "Config.Retention"},
		{core.Config{Lease: time.Hour, Retention: time.Minute}, "Config.Retention"},
		{core.Config{MinRetryAfter: -1}, "MinRetryAfter"},
		{core.Config{MinRetryAfter: time.Minute, MaxRetryAfter: time.Second}, "Config.MaxRetryAfter"},
	}
	for _, b := range bad {
		_, err := core.New(store, &b.cfg)
		require.ErrorContains(t, err, b.want)
	}
	_, err := core.New(nil, nil)
	require.ErrorContains(t, err, "store is nil")

	cfg := &core.Config{}
	g, err := core.New(store, cfg)
	require.NoError(t, err)
	require.Equal(t, core.Config{}, *cfg, "New never writes to the caller's Config")
	k, err := g.StoredKey("email:1")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(k, "jobonce:"), "the default prefix")
	require.Same(t, slog.Default(), g.Logger(), "the default logger")
}

func TestStoredKey(t *testing.T) {
	plain := func(key string) (string, error) {
		g, err := core.New(memstore.New(), &core.Config{KeyPrefix: "p:", PlainKeys: true})
		require.NoError(t, err)
		return g.StoredKey(key)
	}
	_, err := plain("")
	require.ErrorIs(t, err, core.ErrInvalidKey)
	k, err := plain("email:1")
	require.NoError(t, err)
	require.Equal(t, "p:email:1", k)
	long := strings.Repeat("x", core.MaxKeyLen+1)
	k, err = plain(long)
	require.NoError(t, err)
	require.Len(t, k, len("p:")+44)
	require.True(t, strings.HasPrefix(k, "p:#"))
	k2, _ := plain(long[:len(long)-1] + "y")
	require.NotEqual(t, k, k2)
	g, err := core.New(memstore.New(), &core.Config{KeyPrefix: "p:"})
	require.NoError(t, err)
	hashed, err := g.StoredKey("email:1")
	require.NoError(t, err)
	require.Len(t, hashed, len("p:")+20, "hashed by default, 128 bits in Ascii85")
	require.NotContains(t, hashed[2:], "{", "no Redis Cluster hash tag")
	require.Len(t, core.Fingerprint([]byte("payload")), 22, "128 bits")
	for _, reserved := range []string{"#short", "enq#report"} {
		k, err := plain(reserved)
		require.NoError(t, err)
		require.Len(t, k, len("p:")+44, "%q is hashed: its plain name is kept for hashed keys and Enqueue markers", reserved)
	}
	require.Equal(t, core.Fingerprint([]byte("a")), core.Fingerprint([]byte("a")))
	require.NotEqual(t, core.Fingerprint([]byte("a")), core.Fingerprint([]byte("b")))
}

func TestOutcomes(t *testing.T) {
	for o := core.Ran; o <= core.Canceled; o++ {
		require.NotEqual(t, "unknown", o.String(), "outcome %d has a name", o)
	}
	require.Equal(t, "unknown", core.Outcome(200).String())
	require.False(t, core.Executed(core.Canceled))
	require.True(t, core.Executed(core.Failed))
	require.False(t, core.Executed(core.Duplicate))
}

func TestRunningError(t *testing.T) {
	err := error(&core.RunningError{RetryAfter: 2 * time.Second})
	wrapped := errors.Join(errors.New("context"), err)
	require.ErrorIs(t, wrapped, core.ErrRunning)
	d, ok := core.RetryAfter(wrapped)
	require.True(t, ok)
	require.Equal(t, 2*time.Second, d)
	_, ok = core.RetryAfter(errors.New("other"))
	require.False(t, ok)
	require.Contains(t, err.Error(), "2s")
}

func TestObserverSeesEveryOutcome(t *testing.T) {
	var seen []core.Event
	g, err := core.New(memstore.New(), &core.Config{Observer: func(_ context.Context, e core.Event) { seen = append(seen, e) }})
	require.NoError(t, err)
	ctx := context.Background()
	_, _ = g.Do(ctx, "a", func(context.Context) error { return nil })
	_, _ = g.Do(ctx, "a", func(context.Context) error { return nil })
	_, _ = g.Do(ctx, "b", func(context.Context) error { return errors.New("x") })
	_, _ = g.Do(ctx, "", func(context.Context) error { return nil })
	got := make([]core.Outcome, len(seen))
	for i, e := range seen {
		got[i] = e.Outcome
	}
	require.Equal(t, []core.Outcome{core.Ran, core.Duplicate, core.Failed, core.Rejected}, got)
	require.Equal(t, "a", seen[0].Key)
	require.EqualError(t, seen[2].Err, "x")
}
