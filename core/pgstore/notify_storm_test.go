package pgstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/internal/pgtest"
	"github.com/jobonce/jobonce/internal/testenv"
)

// stormBound is the most reads of its key a copy that waits for d makes
// with a signal: once listening has begun, once when the running copy's
// marker is written, once per timer of its own (after 1s, then 2s, 4s, …),
// and one to spare.
func stormBound(d time.Duration) int {
	n := 3
	for next, at := time.Second, time.Second; at <= d; next, at = 2*next, at+2*next {
		n++
	}
	return n
}

// TestWaiterStormCostsEachCopyAFewReads: 100 copies of a job that runs
// for 3s arrive 2 to 5ms apart on a pool of 4 connections, on one Guard or
// spread over eight, and wait for it. Each reads the key a few times,
// however many wait beside it, and every one is a Duplicate once the job's
// marker is written.
func TestWaiterStormCostsEachCopyAFewReads(t *testing.T) {
	testenv.Short(t)
	for _, guards := range []int{1, 8} {
		t.Run(fmt.Sprintf("guards=%d", guards), func(t *testing.T) {
			_, schema := pgtest.Postgres(t)
			s := migratedStore(t, pgtest.PostgresOn(t, schema, 4), nil)
			res := testenv.RunStorm(t, s, testenv.Prefix(t), testenv.Storm{Copies: 100, Guards: guards,
				Apart: [2]time.Duration{2 * time.Millisecond, 5 * time.Millisecond}, Hold: 3 * time.Second})
			testenv.Report(t, "%d copies on %d Guards, 4 connections: %d reads in %s (%.1f a copy, most %d); settled after the marker: p50 %s, p99 %s, max %s; %v",
				len(res.Reads), guards, res.Total(), res.Elapsed.Round(time.Millisecond), float64(res.Total())/float64(len(res.Reads)), res.Most(),
				res.Quantile(0.5), res.Quantile(0.99), res.Quantile(1), res.Outcomes)
			require.LessOrEqual(t, res.Most(), stormBound(res.Elapsed), "a copy read its unchanged key again as others joined")
			require.Equal(t, map[string]int{"duplicate": 100}, res.Outcomes)
		})
	}
}
