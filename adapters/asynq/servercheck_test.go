package asynqonce_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	asynqonce "github.com/jobonce/jobonce/adapters/asynq"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/testenv"
)

// fastRetry is a retry policy of the server's own, not the middleware's,
// that brings copies back at once: no later than the claim's remaining
// lease, so as good as RetryDelay.
func fastRetry(int, error, *asynq.Task) time.Duration { return 0 }

// slowRetry stands in for asynq.DefaultRetryDelayFunc (15s or more): a
// retry policy of the server's own that brings copies back well after the
// claim's remaining lease (100ms here) and the 7s the check allows beyond it.
func slowRetry(int, error, *asynq.Task) time.Duration { return 9 * time.Second }

// hintRetry is a retry policy of the user's own that honours the running
// claim's hint, as RetryDelay does.
func hintRetry(_ int, err error, _ *asynq.Task) time.Duration {
	if d, ok := core.RetryAfter(err); ok {
		return d
	}
	return time.Second
}

// A server configured without the middleware's IsFailure, or with a
// RetryDelayFunc that brings running copies back late, or both, is noticed
// when the copies it sent back as running come back: one warning on the
// Guard's Logger, naming what is missing and its fix only, however many
// copies come back. A server configured with both (RetryDelay or
// RetryDelayOr), or with a RetryDelayFunc of its own that honours the
// claim's hint (or brings copies back sooner), gets none for it.
func TestServerWithoutIsFailureOrRetryDelayIsWarnedOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		isFailure func(error) bool
		delay     asynq.RetryDelayFunc
		missing   string // "" for no warning
	}{
		{"Neither", nil, slowRetry, "IsFailure,RetryDelayFunc"},
		{"NoIsFailure", nil, asynqonce.RetryDelay, "IsFailure"},
		{"NoIsFailureAndAFastRetryOfItsOwn", nil, fastRetry, "IsFailure"},
		{"NoRetryDelay", asynqonce.IsFailure, slowRetry, "RetryDelayFunc"},
		{"ARetryDelayOfItsOwnHonouringTheHint", asynqonce.IsFailure, hintRetry, ""},
		{"Both", asynqonce.IsFailure, asynqonce.RetryDelay, ""},
		{"BothWithRetryDelayOr", asynqonce.IsFailure, asynqonce.RetryDelayOr(fastRetry), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newAsynqEnv(t)
			var outs testenv.Outcomes
			var warnings testenv.Warnings
			// A short hint, so that RetryDelay brings the copies back quickly.
			g := testenv.RedisGuard(t, &core.Config{Observer: outs.Observe, Logger: warnings.Logger(),
				MinRetryAfter: 100 * time.Millisecond, MaxRetryAfter: 100 * time.Millisecond})
			started, release := make(chan struct{}), make(chan struct{})
			h := asynqonce.MustMiddleware(g, nil)(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
				close(started) // a second run would panic here
				<-release
				return nil
			}))
			cfg := e.serverConfig(4)
			cfg.IsFailure, cfg.RetryDelayFunc = tc.isFailure, tc.delay
			cfg.DelayedTaskCheckInterval = 100 * time.Millisecond
			e.start(t, cfg, h)

			task := asynq.NewTask("welcome", []byte("user-42"))
			e.enqueue(t, task)
			<-started
			e.enqueue(t, task)
			e.enqueue(t, task)
			require.Eventually(t, func() bool { return outs.Get(core.Running) >= 2 }, 10*time.Second, 10*time.Millisecond,
				"both copies find the job running")
			close(release)
			require.Eventually(t, func() bool { return outs.Get(core.Duplicate) == 2 }, 20*time.Second, 20*time.Millisecond,
				"both copies come back and are duplicates")
			qi := e.waitEmpty(t, 10*time.Second)

			var found []string
			for _, msg := range warnings.Messages() {
				if strings.Contains(msg, "jobonce: asynqonce: the Asynq server's asynq.Config.") {
					found = append(found, msg)
				}
			}
			if tc.missing == "" {
				require.Empty(t, found)
				require.Zero(t, qi.Failed, "no running copy was counted as failed")
				return
			}
			require.Len(t, found, 1, "one warning for both copies")
			msg := found[0]
			require.Contains(t, msg, "asynq.Config."+strings.ReplaceAll(tc.missing, ",", " and ")+" ")
			require.Contains(t, msg, " not the middleware's: jobs still run once")
			noIsFailure, noRetryDelay := strings.Contains(tc.missing, "IsFailure"), strings.Contains(tc.missing, "RetryDelayFunc")
			switch {
			case noIsFailure && noRetryDelay:
				require.Contains(t, msg, "set IsFailure: asynqonce.IsFailure, RetryDelayFunc: asynqonce.RetryDelay in asynq.Config")
			case noIsFailure:
				require.Contains(t, msg, "set IsFailure: asynqonce.IsFailure in asynq.Config")
			default:
				require.Contains(t, msg, "set RetryDelayFunc: asynqonce.RetryDelay in asynq.Config")
			}
			if noIsFailure {
				require.Contains(t, msg, "charged a retry and counted as failed")
				require.Equal(t, 2, qi.Failed, "each running copy was counted as failed")
			} else {
				require.NotContains(t, msg, "counted as failed", "IsFailure is the middleware's")
				require.Zero(t, qi.Failed)
			}
			if noRetryDelay {
				require.Contains(t, msg, "not after the running claim's remaining lease (100ms)")
			} else {
				require.NotContains(t, msg, "RetryDelayFunc", "the copies came back on time")
			}
		})
	}
}
