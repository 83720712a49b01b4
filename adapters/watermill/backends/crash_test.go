package backends_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/pgstore"
	"github.com/jobonce/jobonce/internal/pgtest"
	"github.com/jobonce/jobonce/internal/testenv"
)

// The crash tests run the experiment behind jobonce's design on real
// brokers: every job is published twice, the second copy gap messages
// after the first; worker processes (this test binary, re-executed by
// testenv.StartWorker) consume them in one group, each with a router whose
// handler runs many messages at once; one worker is SIGKILLed mid-run,
// and its unacknowledged messages go to the others. Each effect is a row
// in PostgreSQL, so duplicates and missing jobs are exact.

const crashSpecEnv = "JOBONCE_WATERMILL_CRASH"

// crashKilled is the index of the worker killed mid-run.
const crashKilled = 1

// crashSize is a crash test's size.
type crashSize struct {
	jobs      int // each published twice
	gap       int // the second copy of a job comes this many messages after the first
	consumers int // worker processes
	handlers  int // messages each worker runs at once
}

// publishedSize is the experiment as published.
var publishedSize = crashSize{jobs: 3000, gap: 20, consumers: 3, handlers: 20}

// crashSpec tells a worker process what to run; it travels as JSON in
// crashSpecEnv.
type crashSpec struct {
	Backend  string
	Strategy string
	Worker   int // this worker's index
	Handlers int
	Topic    string
	Prefix   string // of the Redis keys: the Guard's, the naive strategies', the acknowledged messages'
	Schema   string // the PostgreSQL schema of the effects (and keys) table
	// KillAfter, for the worker to kill, is how many effects must be made
	// before it says it is ready to be killed (see consumer.readyToBeKilled).
	KillAfter int
}

// The published experiment, on Redis Streams: all six strategies at the
// published size. The naive rows show their failure modes (with no guard
// every job acts twice; a claim without a lease loses the killed worker's
// jobs in flight); the jobonce rows lose nothing and repeat an effect only
// where the killed worker made it and died before its done marker (the
// gap), which an idempotency key or a transaction closes.
func TestCrashRedisStreamPublishedExperiment(t *testing.T) {
	testenv.Short(t)
	runExperiment(t, redisStreamCrash, crashStrategies, publishedSize)
}

// The crash test on RabbitMQ: the jobonce row, at the published size.
func TestCrashRabbitMQ(t *testing.T) {
	testenv.Short(t)
	runExperiment(t, rabbitMQCrash, []crashStrategy{strategyNamed(t, jobonceRow)}, publishedSize)
}

// The crash test on NATS JetStream: the jobonce row, at the published size.
func TestCrashNATSJetStream(t *testing.T) {
	testenv.Short(t)
	runExperiment(t, natsCrash, []crashStrategy{strategyNamed(t, jobonceRow)}, publishedSize)
}

// runExperiment runs each strategy on b, checks its tally and reports the
// table.
func runExperiment(t *testing.T, b crashBackend, strategies []crashStrategy, size crashSize) {
	var rows []crashRow
	for _, s := range strategies {
		t.Run(s.name, func(t *testing.T) {
			r := runCrash(t, b, s, size)
			testenv.Report(t, "%s, %d jobs published twice, %d workers x %d handlers, one SIGKILLed after %d effects: %s; published: %s",
				b.label, size.jobs, size.consumers, size.handlers, r.killedAt, r.summary(), r.published)
			rows = append(rows, r)
			s.check(t, r, size)
		})
	}
	t.Logf("%s: %d jobs, each published twice %d messages apart; %d worker processes x %d handlers; worker %d SIGKILLed after a third of the effects\n%s",
		b.label, size.jobs, size.gap, size.consumers, size.handlers, crashKilled, table(rows))
}

// runCrash publishes every job twice, starts the workers, kills one once a
// third of the effects are made and half its handlers are inside a job's
// work, waits until every message is handled and the broker holds none,
// stops the others and counts the effects.
func runCrash(t *testing.T, b crashBackend, s crashStrategy, size crashSize) crashRow {
	ctx := context.Background()
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	pool, schema := pgtest.Postgres(t)
	createEffects(t, pool)
	if s.tx {
		_, err := pgstore.New(ctx, pool, &pgstore.Config{Migrate: true})
		require.NoError(t, err)
	}
	topic := b.topic(prefix)
	pub, idle := b.prepare(t, topic)
	begin := time.Now()
	require.NoError(t, pub.Publish(topic, publishedTwice(size.jobs, size.gap)...))
	published := time.Since(begin)

	spec := crashSpec{Backend: b.name, Strategy: s.name, Handlers: size.handlers, Topic: topic, Prefix: prefix, Schema: schema}
	workers := make([]*testenv.Worker, size.consumers)
	for i := range workers {
		spec.Worker, spec.KillAfter = i, 0
		if i == crashKilled {
			spec.KillAfter = size.jobs / 3
		}
		env, err := json.Marshal(spec)
		require.NoError(t, err)
		workers[i] = testenv.StartWorker(t, "TestCrashWorker", crashSpecEnv+"="+string(env))
	}
	start := time.Now()
	for _, w := range workers {
		_, err := w.WaitFor(time.Minute, func(line string) bool { return line == "started" })
		require.NoError(t, err)
	}

	_, err := workers[crashKilled].WaitFor(2*time.Minute, func(line string) bool { return line == "ready to be killed" })
	require.NoError(t, err)
	require.NoError(t, workers[crashKilled].Kill())
	killed := time.Since(start)
	killedAt, _, err := effectCounts(ctx, pool, crashKilled)
	require.NoError(t, err)

	// Every message handled (the workers record each one before the router
	// acknowledges it), and the broker holds none waiting or
	// unacknowledged: the settled state.
	poll(t, 2*time.Minute, "every message acknowledged", func() (bool, string, error) {
		acked, err := rdb.SCard(ctx, prefix+"acked").Result()
		if err != nil {
			return false, "", err
		}
		ok, state, err := idle(ctx)
		return ok && acked == int64(2*size.jobs), fmt.Sprintf("%d of %d messages acknowledged; broker: %s", acked, 2*size.jobs, state), err
	})
	took := time.Since(start)
	stopped := make([]error, len(workers))
	var wg sync.WaitGroup
	for i, w := range workers {
		if i != crashKilled {
			wg.Go(func() { stopped[i] = w.Stop(time.Minute) })
		}
	}
	wg.Wait()
	for i, w := range workers {
		if i != crashKilled {
			require.NoError(t, stopped[i], "worker %d", i)
			t.Logf("worker %d: %s", i, lastLine(w, "outcomes"))
		}
	}

	r := crashRow{strategy: s.name, published: s.published, leased: s.leased, killedAt: killedAt, took: took}
	r.tally = countEffects(t, pool, size.jobs, crashKilled)
	absorbed, err := rdb.Get(ctx, prefix+"absorbed").Int()
	if err == nil {
		r.absorbed = absorbed
	}
	t.Logf("published in %s; worker %d killed %s after the start, after %d effects; settled %s after the start: %s",
		published.Round(time.Millisecond), crashKilled, killed.Round(time.Millisecond), killedAt, took.Round(time.Millisecond), r.summary())
	return r
}

// publishedTwice returns the messages of jobs 0 to jobs-1, each twice, the
// second copy gap messages after the first, as a producer that retries
// sends them. Each copy has a UUID of its own; its payload is the job.
func publishedTwice(jobs, gap int) []*message.Message {
	order := make([]int, 0, 2*jobs)
	for i := range jobs {
		order = append(order, i)
		if i >= gap {
			order = append(order, i-gap)
		}
	}
	for i := max(jobs-gap, 0); i < jobs; i++ {
		order = append(order, i)
	}
	msgs := make([]*message.Message, len(order))
	for i, job := range order {
		msgs[i] = message.NewMessage(watermill.NewUUID(), message.Payload(strconv.Itoa(job)))
	}
	return msgs
}

// poll calls cond every 10ms until it reports true, and fails the test
// after within with what, cond's last state and its last error.
func poll(t *testing.T, within time.Duration, what string, cond func() (ok bool, state string, err error)) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var state string
	var err error
	for time.Now().Before(deadline) {
		var ok bool
		if ok, state, err = cond(); ok && err == nil {
			return
		}
		<-tick.C
	}
	t.Fatalf("waited %s for %s: %s (last error: %v)", within, what, state, err)
}

// lastLine returns the worker's last output line that starts with word.
func lastLine(w *testenv.Worker, word string) string {
	lines := strings.Split(w.Output(), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], word) {
			return lines[i]
		}
	}
	return ""
}

// TestCrashWorker is the worker process of the crash tests; it returns at
// once unless started by one. It consumes the topic until SIGTERM.
func TestCrashWorker(t *testing.T) {
	if !testenv.IsWorker(t) {
		return
	}
	var spec crashSpec
	require.NoError(t, json.Unmarshal([]byte(os.Getenv(crashSpecEnv)), &spec))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	c := &consumer{t: t, spec: spec, rdb: testenv.Redis(t, ""), pool: pgtest.PostgresOn(t, spec.Schema, 10)}
	mw, handler := strategyNamed(t, spec.Strategy).handle(c)

	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 30 * time.Second}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddMiddleware((&ackRecorder{rdb: c.rdb, key: spec.Prefix + "acked"}).middleware)
	if mw != nil {
		router.AddMiddleware(mw)
	}
	router.AddConsumerHandler("effect", spec.Topic, crashBackendNamed(t, spec.Backend).subscriber(t, spec), handler)
	done := make(chan error, 1)
	go func() { done <- router.Run(context.Background()) }()
	select {
	case <-router.Running():
	case err := <-done:
		t.Fatalf("the router stopped: %v", err)
	}
	fmt.Println("started")
	if spec.KillAfter > 0 {
		go c.readyToBeKilled(ctx)
	}
	<-ctx.Done()
	require.NoError(t, router.Close())
	require.NoError(t, <-done)
	o := &c.outs
	fmt.Printf("outcomes: ran %d, duplicate %d, running %d, failed %d, unavailable %d, lease lost %d\n",
		o.Get(core.Ran), o.Get(core.Duplicate), o.Get(core.Running), o.Get(core.Failed), o.Get(core.Unavailable), o.Get(core.LeaseLost))
}

// ackRecorder adds the UUID of each message its handler handled (the
// router acknowledges it next) to a Redis set. It records before the
// acknowledgement, so that a worker killed in between leaves a message
// recorded and still unacknowledged, which the broker delivers again,
// rather than one acknowledged and never recorded.
type ackRecorder struct {
	rdb *redis.Client
	key string
}

// middleware goes outermost, so that it sees every delivery's outcome.
func (a *ackRecorder) middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		out, err := h(msg)
		if err == nil {
			err = a.rdb.SAdd(context.WithoutCancel(msg.Context()), a.key, msg.UUID).Err()
		}
		return out, err
	}
}
