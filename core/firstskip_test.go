package core_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// adapterHints are the KeyHints the adapters give their default keys.
var adapterHints = map[string]core.KeyHint{
	"asynq": {Key: "task type and payload hash", Settings: "asynqonce: set Config.Key, or list the task type in Config.PeriodicTypes (tasks of an asynq.Scheduler, or of EnqueueOnce once per window) or Config.UnguardedTypes"},
	"river": {Key: "kind and args hash", Settings: "riveronce: set Config.Key, give the args a OnceKey (Keyer), or exempt the kind with Config.Skip"},
	"sqs":   {Key: "queue and body hash", Settings: "sqsonce: set Config.KeyAttribute or Config.Key"},
	"watermill": {Key: "handler, topic and payload hash",
		Settings: "watermillonce: set Config.Key (the message UUID, a metadata field), or exempt messages with Config.Skip"},
}

// runTwice runs job, then each of its copies, returning the outcomes.
func runTwice(t *testing.T, g *core.Guard, job core.Job, copies int) []core.Outcome {
	t.Helper()
	ctx := context.Background()
	var outs []core.Outcome
	for i := range copies + 1 {
		res, err := g.Run(ctx, job, func(context.Context) ([]byte, error) { return nil, nil })
		require.NoError(t, err)
		outs = append(outs, res.Outcome)
		if i == 0 {
			time.Sleep(20 * time.Millisecond) // the copy's delay, which its lag reports; not a synchronisation
		}
	}
	return outs
}

// TestFirstSkipUnderTheDefaultKeyIsLoggedAtInfo: the first Duplicate of a
// kind under an adapter's default key is logged at Info with its kind, its
// lag and the adapter's setting to key it otherwise; later ones at Debug; a
// key the user named never logs a skip at Info.
func TestFirstSkipUnderTheDefaultKeyIsLoggedAtInfo(t *testing.T) {
	t.Parallel()
	var logs testenv.Records
	g := testenv.NewGuard(t, memstore.New(), &core.Config{Retention: time.Hour, Logger: logs.Logger()})
	refresh := core.Job{Key: "cache:refresh:" + core.Fingerprint(nil), Kind: "cache:refresh", Source: "asynq", DefaultKey: true, KeyHint: adapterHints["asynq"]}
	require.Equal(t, []core.Outcome{core.Ran, core.Duplicate, core.Duplicate}, runTwice(t, g, refresh, 2))

	skips := logs.Where("outcome", "duplicate")
	require.Len(t, skips, 2)
	first := skips[0]
	require.Equal(t, slog.LevelInfo, first.Level)
	require.Equal(t, "cache:refresh", first.Attrs["kind"])
	require.Equal(t, "asynq", first.Attrs["source"])
	require.Contains(t, first.Message, "default key")
	require.Contains(t, first.Message, "Config.PeriodicTypes", "names the adapter's setting")
	lag, err := time.ParseDuration(first.Attrs["lag"])
	require.NoError(t, err, "the first copy's lag is logged")
	require.GreaterOrEqual(t, lag, 20*time.Millisecond)
	require.Less(t, lag, time.Minute)
	require.Equal(t, slog.LevelDebug, skips[1].Level, "later skips of the kind stay at Debug")
	require.Equal(t, "jobonce: duplicate", skips[1].Message)

	other := core.Job{Key: "sitemap:" + core.Fingerprint(nil), Kind: "sitemap", Source: "river", DefaultKey: true, KeyHint: adapterHints["river"]}
	runTwice(t, g, other, 1)
	sitemap := logs.Where("kind", "sitemap")
	require.Equal(t, slog.LevelInfo, sitemap[len(sitemap)-1].Level, "each kind's first skip is logged at Info")
	require.Contains(t, sitemap[len(sitemap)-1].Message, "Config.Skip")

	named := core.Job{Key: "report:2024-05-01", Fingerprint: "fp", Kind: "report", Source: "asynq"}
	runTwice(t, g, named, 2)
	for _, r := range logs.Where("kind", "report") {
		require.Equal(t, slog.LevelDebug, r.Level, "a named key's skips stay at Debug: %s", r.Message)
	}
}

// TestFirstSkipsAreRememberedForABoundedSetOfKinds: past 100 kinds, a new
// kind's first skip is logged at Debug, like later skips.
func TestFirstSkipsAreRememberedForABoundedSetOfKinds(t *testing.T) {
	t.Parallel()
	var logs testenv.Records
	g := testenv.NewGuard(t, memstore.New(), &core.Config{Logger: logs.Logger()})
	ctx := context.Background()
	nop := func(context.Context) ([]byte, error) { return nil, nil }
	for i := range 101 {
		job := core.Job{Key: "k" + strconv.Itoa(i), Kind: "kind" + strconv.Itoa(i), Source: "sqs", DefaultKey: true, KeyHint: adapterHints["sqs"]}
		for range 2 {
			_, err := g.Run(ctx, job, nop)
			require.NoError(t, err)
		}
	}
	var info int
	for _, r := range logs.All() {
		if r.Level == slog.LevelInfo {
			info++
		}
	}
	require.Equal(t, 100, info)
	last := logs.Where("kind", "kind100")
	require.Equal(t, slog.LevelDebug, last[len(last)-1].Level)
}

// TestShadowModeLogsTheFirstWouldBeSkipAtInfo: in shadow mode, the first job
// of a kind that enforcement would skip as a duplicate under the default key
// is logged at Info, in shadow's words and with the adapter's setting; later
// ones at Debug.
func TestShadowModeLogsTheFirstWouldBeSkipAtInfo(t *testing.T) {
	t.Parallel()
	var logs testenv.Records
	g := testenv.NewGuard(t, memstore.New(), &core.Config{Shadow: true, Logger: logs.Logger()})
	job := core.Job{Key: "report:" + core.Fingerprint([]byte("{}")), Kind: "report", Source: "asynq", DefaultKey: true, KeyHint: adapterHints["asynq"]}
	runs := 0
	for range 3 {
		_, err := g.Run(context.Background(), job, func(context.Context) ([]byte, error) { runs++; return nil, nil })
		require.NoError(t, err)
	}
	require.Equal(t, 3, runs, "shadow mode runs every copy")

	would := logs.Where("would_skip", "duplicate")
	require.Len(t, would, 2)
	require.Equal(t, slog.LevelInfo, would[0].Level, "the first would-be skip of the kind")
	require.Contains(t, would[0].Message, "enforcement would skip as a duplicate under the default key")
	require.Contains(t, would[0].Message, "Config.PeriodicTypes", "names the adapter's setting")
	require.NotContains(t, would[0].Message, "skipped a duplicate", "nothing was skipped")
	require.Equal(t, "report", would[0].Attrs["kind"])
	require.Equal(t, slog.LevelDebug, would[1].Level, "later ones stay at Debug")

	named := core.Job{Key: "report:2024-05-01", Kind: "named", Source: "asynq"}
	for range 2 {
		_, err := g.Run(context.Background(), named, func(context.Context) ([]byte, error) { return nil, nil })
		require.NoError(t, err)
	}
	for _, r := range logs.Where("kind", "named") {
		require.Equal(t, slog.LevelDebug, r.Level, "a named key's would-be skips stay at Debug: %s", r.Message)
	}
}

// The first skip's message names what the adapter's default key is made of,
// in the adapter's own words (Job.KeyHint: an SQS queue and body, a
// Watermill handler and topic), and without them a kind and a payload.
func TestFirstSkipNamesTheAdaptersDefaultKey(t *testing.T) {
	t.Parallel()
	for source, want := range map[string]string{
		"asynq":     "(task type and payload hash)",
		"river":     "(kind and args hash)",
		"sqs":       "(queue and body hash)",
		"watermill": "(handler, topic and payload hash)",
		"":          "(kind and payload hash)",
	} {
		var logs testenv.Records
		g := testenv.NewGuard(t, memstore.New(), &core.Config{Logger: logs.Logger()})
		job := core.Job{Key: "k:" + core.Fingerprint(nil), Kind: "k", Source: source, DefaultKey: true, KeyHint: adapterHints[source]}
		runTwice(t, g, job, 1)
		skips := logs.Where("outcome", "duplicate")
		require.Len(t, skips, 1, "source %q", source)
		require.Contains(t, skips[0].Message, "under the default key "+want, "source %q", source)
	}
}
