package watermillonce_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	watermillonce "github.com/jobonce/jobonce/adapters/watermill"
	"github.com/jobonce/jobonce/adapters/watermill/internal/watermilltest"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// Outside a router a message's context names no handler and no topic: the
// earlier release keyed a message by ":" and its payload's fingerprint.
func earlierKey(payload string) string { return ":" + core.Fingerprint([]byte(payload)) }

var legacyKeys = &watermillonce.Config{LegacyDefaultKeys: true}

// A message the earlier release ran is a duplicate under LegacyDefaultKeys
// (without it, the new key is free and it would run again).
func TestLegacyDefaultKeysSkipAMessageTheEarlierReleaseRan(t *testing.T) {
	t.Parallel()
	g := testenv.MemGuard(t, nil)
	_, err := g.Run(context.Background(), core.Job{Key: earlierKey("pay")}, func(context.Context) ([]byte, error) { return nil, nil })
	require.NoError(t, err)
	var runs atomic.Int64
	handler := func(*message.Message) ([]*message.Message, error) { runs.Add(1); return nil, nil }

	_, err = watermillonce.MustMiddleware(g, legacyKeys)(handler)(watermilltest.NewMessage("pay"))
	require.NoError(t, err)
	require.Zero(t, runs.Load(), "run again under the new key")

	_, err = watermillonce.MustMiddleware(g, nil)(handler)(watermilltest.NewMessage("pay"))
	require.NoError(t, err)
	require.EqualValues(t, 1, runs.Load(), "without LegacyDefaultKeys the earlier release's marker is not seen")
}

// A message run under LegacyDefaultKeys leaves a done marker under both
// keys: a process of the earlier release and one without the setting
// each find it done. The handler sees the earlier key's idempotency key,
// and the run is reported under each key.
func TestLegacyDefaultKeysLeaveMarkersBothReleasesFind(t *testing.T) {
	t.Parallel()
	var outs testenv.Outcomes
	g := testenv.MemGuard(t, &core.Config{Observer: outs.Observe})
	var runs atomic.Int64
	var seen string
	handler := func(msg *message.Message) ([]*message.Message, error) {
		runs.Add(1)
		seen, _ = core.IdempotencyKey(msg.Context())
		return []*message.Message{watermilltest.NewMessage("receipt")}, nil
	}
	_, err := watermillonce.MustMiddleware(g, legacyKeys)(handler)(watermilltest.NewMessage("pay"))
	require.NoError(t, err)
	require.EqualValues(t, 2, outs.Get(core.Ran), "Ran under each key")

	res, err := g.Run(context.Background(), core.Job{Key: earlierKey("pay")}, func(ctx context.Context) ([]byte, error) {
		t.Error("the earlier release ran it again")
		return nil, nil
	})
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, res.Outcome)

	out, err := watermillonce.MustMiddleware(g, nil)(handler)(watermilltest.NewMessage("pay"))
	require.NoError(t, err)
	require.Len(t, out, 1, "the produced message is stored under the new key")
	require.EqualValues(t, 1, runs.Load())

	var earlier string
	_, err = testenv.MemGuard(t, nil).Run(context.Background(), core.Job{Key: earlierKey("pay")}, func(ctx context.Context) ([]byte, error) {
		earlier, _ = core.IdempotencyKey(ctx)
		return nil, nil
	})
	require.NoError(t, err)
	require.Equal(t, earlier, seen, "the handler sees the earlier release's idempotency key")
}

// A copy that finds the earlier release running the message waits for it
// and is then a duplicate.
func TestLegacyDefaultKeysWaitForTheEarlierReleaseRunningTheMessage(t *testing.T) {
	t.Parallel()
	store := testenv.NewAwaits(memstore.New())
	var outs testenv.Outcomes
	g := testenv.NewGuard(t, store, &core.Config{Observer: outs.Observe})
	started, release := make(chan struct{}), make(chan struct{})
	earlier := make(chan error, 1)
	go func() {
		_, err := g.Run(context.Background(), core.Job{Key: earlierKey("pay")}, func(context.Context) ([]byte, error) {
			close(started)
			<-release
			return nil, nil
		})
		earlier <- err
	}()
	<-started
	var runs atomic.Int64
	done := make(chan error, 1)
	go func() {
		_, err := watermillonce.MustMiddleware(g, legacyKeys)(func(*message.Message) ([]*message.Message, error) {
			runs.Add(1)
			return nil, nil
		})(watermilltest.NewMessage("pay"))
		done <- err
	}()
	store.Began(t, 1) // the copy found the earlier release's claim and waits
	close(release)
	require.NoError(t, <-earlier)
	require.NoError(t, <-done)
	require.Zero(t, runs.Load())
	require.EqualValues(t, 1, outs.Get(core.Duplicate))
}
