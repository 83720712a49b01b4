package riveronce

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/testenv"
)

// noteArgs names its key by user alone: two jobs with other notes for one
// user share a key and differ in their args.
type noteArgs struct {
	User string `json:"user" river:"unique"` // for uniqueNoteArgs
	Note string `json:"note"`
}

func (noteArgs) Kind() string { return "riveronce_note" }

func (a noteArgs) OnceKey() string { return "note:" + a.User }

// uniqueNoteArgs is noteArgs inserted with River's own unique insert on the
// user.
type uniqueNoteArgs noteArgs

func (uniqueNoteArgs) Kind() string { return noteArgs{}.Kind() }

func (uniqueNoteArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

type noteWorker struct {
	river.WorkerDefaults[noteArgs]
	pool *pgxpool.Pool
}

func (w *noteWorker) Work(ctx context.Context, job *river.Job[noteArgs]) error {
	return insertEffect(ctx, w.pool, job.Args.OnceKey(), job.ID)
}

// TestMiddlewareLeavesAWrappedWorkerToWrapsKey: on a client with the
// middleware, a worker registered with Wrap is guarded by the key its args
// declare (Keyer), not by the key the middleware sees (the kind and a hash
// of the args, for jobs inserted without jobonce metadata): two jobs with one
// OnceKey and different args cause one effect, as under Wrap alone, with
// River's unique insert off and on.
func TestMiddlewareLeavesAWrappedWorkerToWrapsKey(t *testing.T) {
	testenv.Short(t)
	t.Parallel()
	for _, c := range []struct {
		name       string
		middleware bool
		unique     bool
	}{
		{"WrapAlone", false, false},
		{"MiddlewareAndWrap", true, false},
		{"MiddlewareAndWrapWithUniqueInsert", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pool, schema := riverSchema(t)
			var outs testenv.Outcomes
			g := testenv.RedisGuard(t, &core.Config{MaxRetryAfter: 100 * time.Millisecond, Observer: outs.Observe})
			workers := river.NewWorkers()
			river.AddWorker(workers, MustWrap[noteArgs](g, &noteWorker{pool: pool}, nil))
			cfg := clientConfig(schema, workers, 4)
			if c.middleware {
				cfg.Middleware = []rivertype.Middleware{MustMiddleware(g, nil)}
			}
			inserter := insertClient(t, pool, schema) // no jobonce metadata
			a, b := noteArgs{User: "9", Note: "a"}, noteArgs{User: "9", Note: "b"}
			var params []river.InsertManyParams
			if c.unique {
				params = []river.InsertManyParams{{Args: uniqueNoteArgs(a)}, {Args: uniqueNoteArgs(b)}}
			} else {
				params = []river.InsertManyParams{{Args: a}, {Args: b}}
			}
			for _, p := range params { // one at a time: River's unique check applies across inserts
				_, err := inserter.Insert(context.Background(), p.Args, nil)
				require.NoError(t, err)
			}
			wantJobs := 2
			if c.unique {
				wantJobs = 1 // River skipped the second insert as a duplicate
			}
			startClient(t, pool, cfg)

			jobs := waitFinished(t, pool, wantJobs, 30*time.Second)
			require.Equal(t, effectStats{Rows: 1, Keys: 1}, readEffectStats(t, pool), "one effect for one OnceKey")
			require.Equal(t, 1, jobs.Completed)
			require.Equal(t, wantJobs-1, jobs.Cancelled, "the other args under the key are a conflict")
			require.EqualValues(t, 1, outs.Get(core.Ran))
			for _, ev := range outs.Events() {
				require.Equal(t, "note:9", ev.Key, "every claim was of the declared key")
			}
		})
	}
}
