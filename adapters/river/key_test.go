package riveronce

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/jobkey"
	"github.com/jobonce/jobonce/internal/testenv"
)

// keyArgs have fields out of jsonb's order, so the args River hands the
// worker are not the bytes inserted.
type keyArgs struct {
	Zeta string `json:"zeta"`
	A    int    `json:"a"`
}

func (keyArgs) Kind() string { return "riveronce_key" }

type keyerArgs struct {
	User string `json:"user"`
}

func (keyerArgs) Kind() string { return "riveronce_keyer" }

func (a keyerArgs) OnceKey() string { return "email:welcome:" + a.User }

type keyPeriodicArgs struct{}

func (keyPeriodicArgs) Kind() string { return "riveronce_key_periodic" }

type keyPeriodicIDArgs struct{}

func (keyPeriodicIDArgs) Kind() string { return "riveronce_key_periodic_id" }

// idRecorder sends the ID of every job it works.
type idRecorder[T river.JobArgs] struct {
	river.WorkerDefaults[T]
	ids chan<- int64
}

func (w *idRecorder[T]) Work(_ context.Context, job *river.Job[T]) error {
	w.ids <- job.ID
	return nil
}

// TestDefaultKeyIsTheKeyTheMiddlewareClaims: through a real River client
// with the middleware, the key claimed for each job (the Guard's Event.Key)
// is DefaultKey of the job's row as River's JobGet reads it back: args
// whose jsonb form differs from the bytes inserted, a Keyer's key recorded
// at insert, occurrences of periodic jobs with and without an ID, and a
// periodic job inserted by a client without the middleware.
func TestDefaultKeyIsTheKeyTheMiddlewareClaims(t *testing.T) {
	testenv.Short(t)
	t.Parallel()
	pool, schema := riverSchema(t)
	var outs testenv.Outcomes
	g := testenv.MemGuard(t, &core.Config{Observer: outs.Observe})
	ids := make(chan int64, 16)
	workers := river.NewWorkers()
	river.AddWorker(workers, &idRecorder[keyArgs]{ids: ids})
	river.AddWorker(workers, &idRecorder[keyerArgs]{ids: ids})
	river.AddWorker(workers, &idRecorder[keyPeriodicArgs]{ids: ids})
	river.AddWorker(workers, &idRecorder[keyPeriodicIDArgs]{ids: ids})
	cfg := clientConfig(schema, workers, 4)
	cfg.Middleware = []rivertype.Middleware{MustMiddleware(g, nil)}
	cfg.PeriodicJobs = []*river.PeriodicJob{
		river.NewPeriodicJob(river.PeriodicInterval(time.Hour), func() (river.JobArgs, *river.InsertOpts) { return keyPeriodicArgs{}, nil },
			&river.PeriodicJobOpts{RunOnStart: true}),
		river.NewPeriodicJob(river.PeriodicInterval(time.Hour), func() (river.JobArgs, *river.InsertOpts) { return keyPeriodicIDArgs{}, nil },
			&river.PeriodicJobOpts{ID: "hourly", RunOnStart: true}),
	}
	client := startClient(t, pool, cfg)
	ctx := context.Background()
	_, err := client.InsertMany(ctx, []river.InsertManyParams{{Args: keyArgs{Zeta: "z", A: 1}}, {Args: keyerArgs{User: "42"}}})
	require.NoError(t, err)
	_, err = insertClient(t, pool, schema).Insert(ctx, keyPeriodicArgs{}, &river.InsertOpts{Metadata: []byte(`{"periodic": true}`)})
	require.NoError(t, err)

	const jobs = 5
	var worked []int64
	deadline := time.After(time.Minute)
	for len(worked) < jobs {
		select {
		case id := <-ids:
			worked = append(worked, id)
		case <-deadline:
			t.Fatalf("%d of %d jobs worked", len(worked), jobs)
		}
	}
	require.Eventually(t, func() bool { return outs.Get(core.Ran) == jobs }, 10*time.Second, 10*time.Millisecond)

	var want []string
	for _, id := range worked {
		row, err := client.JobGet(ctx, id)
		require.NoError(t, err)
		want = append(want, DefaultKey(row))
	}
	var claimed []string
	for _, e := range outs.Events() {
		if e.Outcome == core.Ran {
			claimed = append(claimed, e.Key)
		}
	}
	require.ElementsMatch(t, want, claimed)

	shapes := map[string]bool{}
	for _, key := range want {
		switch {
		case key == "email:welcome:42":
			shapes["keyer"] = true
		case strings.HasPrefix(key, keyArgs{}.Kind()+":"):
			shapes["args"] = true
			require.Equal(t, jobkey.Default(keyArgs{}.Kind(), []byte(`{"a": 1, "zeta": "z"}`)), key, "the args as jsonb prints them")
		case strings.HasPrefix(key, keyPeriodicIDArgs{}.Kind()+":periodic:hourly:"):
			shapes["periodic with an ID"] = true
		case strings.HasPrefix(key, keyPeriodicArgs{}.Kind()+":periodic:job:"):
			shapes["periodic, unrecorded"] = true
		case strings.HasPrefix(key, keyPeriodicArgs{}.Kind()+":periodic:"):
			shapes["periodic"] = true
		}
	}
	require.Len(t, shapes, jobs, "every kind of default key: %v", want)
}

func TestMetadataKeyIsTheFieldTheKeyIsReadFrom(t *testing.T) {
	t.Parallel()
	require.Equal(t, jobkey.RiverKey, MetadataKey)
}
