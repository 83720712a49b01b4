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

// fastRetry is a retry policy of the server's own, not the middleware's: it
// stands in for asynq.DefaultRetryDelayFunc (15s or more), which the
// middleware cannot tell from it, so the copies come back at once.
func fastRetry(int, error, *asynq.Task) time.Duration { return 0 }

// A server configured without the middleware's IsFailure, or RetryDelay, or
// both, is noticed when the copies it sent back as running come back: one
// warning on the Guard's Logger, naming what is missing and the fix, however
// many copies come back. A server configured with both (RetryDelay or
// RetryDelayOr) gets none, and charges no retry.
func TestServerWithoutIsFailureOrRetryDelayIsWarnedOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		isFailure func(error) bool
		delay     asynq.RetryDelayFunc
		missing   string // "" for no warning
	}{
		{"Neither", nil, fastRetry, "IsFailure,RetryDelayFunc"},
		{"NoIsFailure", nil, asynqonce.RetryDelay, "IsFailure"},
		{"NoRetryDelay", asynqonce.IsFailure, fastRetry, "RetryDelayFunc"},
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
			require.Contains(t, found[0], "asynq.Config."+strings.ReplaceAll(tc.missing, ",", " and ")+" ")
			require.Contains(t, found[0], " not the middleware's: jobs still run once")
			require.Contains(t, found[0], "set IsFailure: asynqonce.IsFailure, RetryDelayFunc: asynqonce.RetryDelay in asynq.Config")
			if strings.Contains(tc.missing, "IsFailure") {
				require.Equal(t, 2, qi.Failed, "each running copy was counted as failed")
			}
		})
	}
}
