package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/dynamostore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// Environment of a crash worker process.
const (
	envCrashTable  = "JOBONCE_DYNAMOSTORE_CRASH_TABLE"
	envCrashPrefix = "JOBONCE_DYNAMOSTORE_CRASH_PREFIX"
	envCrashJobs   = "JOBONCE_DYNAMOSTORE_CRASH_JOBS"
	envCrashHold   = "JOBONCE_DYNAMOSTORE_CRASH_HOLD" // from this job on, each job sleeps until killed
)

// TestCrashWorker is the worker process of TestCrashMidJob. It does nothing
// unless started by it: it runs every job through Guard.Do with a 500ms
// lease, printing "effect <key>" as each job's effect and "done <key>
// <outcome>" after it.
func TestCrashWorker(t *testing.T) {
	if !testenv.IsWorker(t) {
		return
	}
	jobs, err := strconv.Atoi(os.Getenv(envCrashJobs))
	require.NoError(t, err)
	hold := jobs
	if v := os.Getenv(envCrashHold); v != "" {
		hold, err = strconv.Atoi(v)
		require.NoError(t, err)
	}
	ctx := context.Background()
	s, err := dynamostore.New(ctx, client(dynalite(t).endpoint), &dynamostore.Config{Table: os.Getenv(envCrashTable), ClockSkew: 20 * time.Millisecond})
	require.NoError(t, err)
	g, err := core.New(s, &core.Config{KeyPrefix: os.Getenv(envCrashPrefix), Lease: 500 * time.Millisecond})
	require.NoError(t, err)
	for j := range jobs {
		key := fmt.Sprintf("job-%03d", j)
		for {
			out, err := g.Do(ctx, key, func(ctx context.Context) error {
				fmt.Printf("effect %s\n", key)
				if j >= hold {
					time.Sleep(time.Minute) // the test kills this process meanwhile
				}
				return nil
			})
			if errors.Is(err, core.ErrRunning) {
				time.Sleep(20 * time.Millisecond) // a queue's retry delay
				continue
			}
			require.NoError(t, err)
			fmt.Printf("done %s %s\n", key, out)
			break
		}
	}
}

// TestCrashMidJob kills a worker process (SIGKILL) in the middle of a job,
// after its effect and before its done marker, then lets a second worker
// run every job again: no job is missing, and only the killed job's effect
// happens twice (the effect-to-marker gap), once its lease lapsed.
func TestCrashMidJob(t *testing.T) {
	testenv.Short(t)
	srv := dynalite(t)
	s := newStore(t, srv, nil)
	const jobs = 100
	env := []string{envCrashTable + "=" + s.Table(), envCrashPrefix + "=" + testenv.RandomID(4) + ":", envCrashJobs + "=" + strconv.Itoa(jobs)}

	first := testenv.StartWorker(t, "TestCrashWorker", append(env, envCrashHold+"=40")...)
	line, err := first.WaitFor(2*time.Minute, func(line string) bool { return line == "effect job-040" })
	require.NoError(t, err, "the worker finished before it could be killed")
	require.NoError(t, first.Kill())
	killed := strings.TrimPrefix(line, "effect ")

	second := testenv.StartWorker(t, "TestCrashWorker", env...)
	require.NoError(t, second.Wait(2*time.Minute), "%s", second.Output())

	effects := map[string]int{}
	for _, out := range []string{first.Output(), second.Output()} {
		for _, l := range strings.Split(out, "\n") {
			if key, ok := strings.CutPrefix(l, "effect "); ok {
				effects[key]++
			}
		}
	}
	require.Len(t, effects, jobs, "no job is missing")
	for key, n := range effects {
		if key == killed {
			require.Equal(t, 2, n, "the killed job ran again once its lease lapsed")
			continue
		}
		require.Equal(t, 1, n, "%s ran once", key)
	}
	require.Contains(t, second.Output(), "done "+killed+" ran")
	require.Contains(t, second.Output(), "done job-000 duplicate", "the second worker finds the first's done markers")
}
