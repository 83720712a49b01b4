package awscrash_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"

	lambdaonce "github.com/jobonce/jobonce/adapters/lambda"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/dynamostore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// Environment of a crash worker process.
const (
	envQueue     = "JOBONCE_AWSCRASH_QUEUE"
	envARN       = "JOBONCE_AWSCRASH_ARN"
	envEndpoint  = "JOBONCE_AWSCRASH_DYNAMODB"         // the Lambda handler's keys
	envEffectsAt = "JOBONCE_AWSCRASH_EFFECTS_DYNAMODB" // the effects and the transactional mode's keys
	envKeys      = "JOBONCE_AWSCRASH_KEYS"             // the Lambda handler's keys table
	envTxKeys    = "JOBONCE_AWSCRASH_TX_KEYS"          // the transactional mode's keys table; unset: no transactional mode
	envEffects   = "JOBONCE_AWSCRASH_EFFECTS"
	envGate      = "JOBONCE_AWSCRASH_GATE"   // effects before the worker holds its handlers; unset: never
	envNoWait    = "JOBONCE_AWSCRASH_NOWAIT" // set: a record whose job runs elsewhere is hidden at once (SQS.WaitRunning -1)
)

// The crash workers' settings.
const (
	crashLease       = 4 * time.Second
	crashSkew        = 100 * time.Millisecond
	crashVisibility  = 3 // the queue's visibility timeout, in seconds
	crashInvocations = 8 // each worker's concurrent invocations
	crashGate        = 200
	crashHeld        = 20 // handlers held at the kill, at least
)

// crashRow is one run of the crash experiment.
type crashRow struct {
	jobs   int
	tx     bool // the effect is written in the transactional mode
	noWait bool // records of running jobs are hidden at once, not held for the running copy
}

// TestLambdaOnDynamoDBCrash runs the crash experiment on dynalite: jobs
// sent twice to an SQS queue, drained by worker processes, each an event
// source mapping over lambdaonce.Wrap on a dynamostore Guard, whose
// handler's effect is a PutItem of an item of its own. The first worker is
// killed with SIGKILL mid-batch, with handlers in flight, some of them
// between their effect and their done marker, and a second one drains the
// queue: no job is missing, and a job has two effects only if the killed
// worker held it in that gap.
func TestLambdaOnDynamoDBCrash(t *testing.T) {
	runCrash(t, crashRow{jobs: 3000})
}

// TestLambdaOnDynamoDBTxCrash runs the crash experiment with the effect
// written in the transactional mode, inside the handler: a Put in the
// TransactWriteItems that holds the job's done marker
// (core.TxGuard[*dynamostore.Tx]). The killed worker's handlers in flight
// include some whose transaction committed and whose Lambda marker was not
// written: their records run again, and find the job done. No job is
// missing and none has two effects. The effects and the transactional
// mode's keys are on moto serving one request at a time
// (TEST_MOTO_SERIAL_ENDPOINT), as dynalite has no transactions, the Lambda
// handler's keys on dynalite; with fewer jobs, as moto copies each table a
// transaction writes.
func TestLambdaOnDynamoDBTxCrash(t *testing.T) {
	runCrash(t, crashRow{jobs: 200, tx: true})
}

// TestLambdaOnDynamoDBCrashNoWait runs the crash experiment with records
// whose job runs elsewhere hidden at once (SQS.WaitRunning -1) rather than
// held until the killed worker's lease lapses: the killed worker's records
// come back while its claims are live, are found running and hidden
// (ChangeMessageVisibilityBatch), and must still run once the claims lapse.
func TestLambdaOnDynamoDBCrashNoWait(t *testing.T) {
	runCrash(t, crashRow{jobs: 200, noWait: true})
}

func runCrash(t *testing.T, row crashRow) {
	testenv.Short(t)
	endpoint, effectsAt := dynamoEndpoint(t, envDynalite), dynamoEndpoint(t, envDynalite)
	if row.tx {
		effectsAt = dynamoEndpoint(t, envMotoSerial)
	}
	c := newSQS(t)
	q := createQueue(t, c, crashVisibility)
	db := newDynamo(effectsAt)
	effects := createEffects(t, db)
	env := []string{envQueue + "=" + q.url, envARN + "=" + q.arn, envEndpoint + "=" + endpoint, envEffectsAt + "=" + effectsAt,
		envKeys + "=" + createKeys(t, newDynamo(endpoint)), envEffects + "=" + effects}
	if row.tx {
		env = append(env, envTxKeys+"="+createKeys(t, db))
	}
	if row.noWait {
		env = append(env, envNoWait+"=1")
	}

	start := time.Now()
	ids := sendEachTwice(t, c, q, row.jobs)
	killed := testenv.StartWorker(t, "TestCrashWorker", append(env, envGate+"="+strconv.Itoa(min(crashGate, row.jobs/4)))...)
	line, err := killed.WaitFor(2*time.Minute, func(line string) bool { return strings.HasPrefix(line, "READY ") })
	require.NoError(t, err, "the worker did not get ready")
	require.NoError(t, killed.Kill())
	killedAt := time.Since(start)
	testenv.StartWorker(t, "TestCrashWorker", env...)
	var made, inflight int
	var gap string
	_, err = fmt.Sscanf(line, "READY effects=%d inflight=%d gap=%s", &made, &inflight, &gap)
	require.NoError(t, err, line)
	inGap := strings.Split(strings.TrimSuffix(gap, ","), ",")
	require.NotEmpty(t, inGap[0], "no handler was killed between its effect and its done marker")

	require.Eventually(t, func() bool { return drained(t, c, q.url) }, 2*time.Minute, 250*time.Millisecond, "the queue was not drained")
	runs := countEffects(t, db, effects)
	var missing, twice []string
	for _, id := range ids {
		switch n := runs[id]; {
		case n == 0:
			missing = append(missing, id)
		case n > 1:
			twice = append(twice, fmt.Sprintf("%s×%d", id, n))
		}
	}
	testenv.Report(t, "%d jobs sent twice; a worker killed at %s after %d effects, with %d handlers in flight, %d of them between effect and marker; drained at %s: %d missing, %d duplicate effects",
		row.jobs, killedAt.Round(100*time.Millisecond), made, inflight, len(inGap), time.Since(start).Round(100*time.Millisecond), len(missing), len(twice))
	require.Empty(t, missing, "missing effects")
	require.Len(t, runs, row.jobs, "effects of unknown jobs")
	if row.tx {
		require.Empty(t, twice, "duplicate effects in the transactional mode")
		return
	}
	require.LessOrEqual(t, len(twice), inflight, "more duplicate effects than handlers in flight at the kill")
	for _, d := range twice {
		id, n, _ := strings.Cut(d, "×")
		require.Equal(t, "2", n, "%s ran more than twice", id)
		require.Contains(t, inGap, id, "%s ran twice but was not between effect and marker at the kill", id)
	}
}

// createKeys creates a keys table for dynamostore, deleted at the end of
// the test, and returns its name.
func createKeys(t testing.TB, db *dynamodb.Client) string {
	t.Helper()
	name := "jobonce_keys_" + testenv.RandomID(6)
	_, err := dynamostore.New(context.Background(), db, &dynamostore.Config{Table: name, CreateTable: true})
	require.NoError(t, err)
	t.Cleanup(func() { deleteTable(db, name) })
	return name
}

// TestCrashWorker is a worker process of the crash experiment; it does
// nothing unless started by it. It runs an event source mapping of
// crashInvocations concurrent invocations over lambdaonce.Wrap, whose
// handler writes the record's effect (with JOBONCE_AWSCRASH_TX_KEYS, in the
// transactional mode).
//
// With JOBONCE_AWSCRASH_GATE, once it made that many effects every handler
// that starts holds until the process is killed: half of them (by job
// number) before their effect, half after it, in the gap before the done
// marker. It prints "READY effects=<made> inflight=<held> gap=<jobs>," once
// crashHeld handlers hold, none is between start and hold, and every effect
// made before the gate is recorded in the store; from then on, handlers hold
// before their effect, so the jobs listed are all that can run twice.
func TestCrashWorker(t *testing.T) {
	if !testenv.IsWorker(t) {
		return
	}
	ctx := context.Background()
	db := newDynamo(os.Getenv(envEffectsAt))
	effects := os.Getenv(envEffects)
	c := newSQS(t)
	q := testQueue{url: os.Getenv(envQueue), arn: os.Getenv(envARN)}
	gate := -1
	if v := os.Getenv(envGate); v != "" {
		var err error
		gate, err = strconv.Atoi(v)
		require.NoError(t, err)
	}

	var made, recorded, passing atomic.Int64 // made: handlers that returned nil before the gate
	s, err := dynamostore.New(ctx, newDynamo(os.Getenv(envEndpoint)), &dynamostore.Config{Table: os.Getenv(envKeys), ClockSkew: crashSkew})
	require.NoError(t, err)
	g, err := core.New(s, &core.Config{
		Lease: crashLease,
		Observer: func(_ context.Context, e core.Event) {
			switch e.Outcome {
			case core.Ran, core.LeaseLost, core.Unrecorded:
				recorded.Add(1)
			}
		},
	})
	require.NoError(t, err)

	// write makes job's effect and reports whether it did.
	write := func(ctx context.Context, job string) (bool, error) {
		_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: effect(effects, job).TableName, Item: effect(effects, job).Item})
		return err == nil, err
	}
	if txKeys := os.Getenv(envTxKeys); txKeys != "" {
		ts, err := dynamostore.New(ctx, db, &dynamostore.Config{Table: txKeys, ClockSkew: crashSkew})
		require.NoError(t, err)
		tg0, err := core.New(ts, nil)
		require.NoError(t, err)
		tg, err := core.NewTxGuard[*dynamostore.Tx](tg0)
		require.NoError(t, err)
		write = func(ctx context.Context, job string) (bool, error) {
			out, err := tg.Do(ctx, job, func(_ context.Context, tx *dynamostore.Tx) error {
				return tx.Add(dtypes.TransactWriteItem{Put: effect(effects, job)})
			})
			return out == core.Ran, err
		}
	}

	var mu sync.Mutex // held by a holding handler's effect, and by READY
	var frozen bool
	var held int
	var gap []string
	hold := func(ctx context.Context, job string) error {
		mu.Lock()
		held++
		if n, _ := strconv.Atoi(strings.TrimPrefix(job, "job-")); !frozen && n%2 == 0 {
			ok, err := write(ctx, job)
			if err != nil {
				mu.Unlock()
				return err
			}
			if ok {
				gap = append(gap, job)
			}
		}
		mu.Unlock()
		<-ctx.Done() // held until the kill
		return ctx.Err()
	}
	h, err := lambdaonce.Wrap(g, func(ctx context.Context, m events.SQSMessage) error {
		passing.Add(1)
		if gate >= 0 && made.Load() >= int64(gate) {
			passing.Add(-1)
			return hold(ctx, m.Body)
		}
		defer passing.Add(-1)
		_, err := write(ctx, m.Body)
		if err == nil {
			made.Add(1)
		}
		return err
	}, func() *lambdaonce.Config {
		cfg := &lambdaonce.Config{Client: c, QueueURL: q.urlOf}
		if os.Getenv(envNoWait) != "" {
			cfg.SQS.WaitRunning = -1
		}
		return cfg
	}())
	require.NoError(t, err)
	if gate >= 0 {
		go func() {
			for {
				mu.Lock()
				if m := made.Load(); m >= int64(gate) && passing.Load() == 0 && recorded.Load() == m && held >= crashHeld && len(gap) > 0 {
					frozen = true
					slices.Sort(gap)
					fmt.Printf("READY effects=%d inflight=%d gap=%s,\n", m, held, strings.Join(gap, ","))
					mu.Unlock()
					return
				}
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	esm{c: c, q: q, h: h, timeout: time.Minute}.run(ctx, crashInvocations)
}
