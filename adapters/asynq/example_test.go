package asynqonce_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	asynqonce "github.com/jobonce/jobonce/adapters/asynq"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// A server with a ServeMux: one middleware line, and IsFailure and
// RetryDelay in the server's configuration. The task is enqueued twice; its
// handler runs once.
func Example() {
	rdb := exampleRedis()
	defer rdb.Close()
	outcomes := make(chan core.Outcome, 10) // to wait for both copies
	guard := exampleGuard(rdb, &core.Config{
		Observer: func(_ context.Context, e core.Event) { outcomes <- e.Outcome },
	})
	queue, deleteQueue := exampleQueue(rdb)
	defer deleteQueue()

	client := asynq.NewClientFromRedisClient(rdb)
	defer client.Close()
	task := asynq.NewTask("email:welcome", []byte("user-42"))
	for range 2 { // two task IDs, one job
		if _, err := client.Enqueue(task, asynq.Queue(queue)); err != nil {
			log.Fatal(err)
		}
	}

	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		IsFailure:      asynqonce.IsFailure,
		RetryDelayFunc: asynqonce.RetryDelay,
		Queues:         map[string]int{queue: 1},
		// One task at a time, so that the copy finds the job done; with more,
		// a copy that finds it running is retried after RetryDelay.
		Concurrency: 1,
		LogLevel:    asynq.WarnLevel,
	})
	mux := asynq.NewServeMux()
	mux.Use(asynqonce.MustMiddleware(guard, nil))
	mux.HandleFunc("email:welcome", func(ctx context.Context, t *asynq.Task) error {
		fmt.Printf("welcome, %s\n", t.Payload())
		return nil
	})
	if err := srv.Start(mux); err != nil {
		log.Fatal(err)
	}
	defer srv.Shutdown()

	timeout := time.After(10 * time.Second)
	for range 2 {
		select {
		case out := <-outcomes:
			fmt.Println(out)
		case <-timeout:
			log.Fatal("the tasks were not processed in time")
		}
	}
	// Output:
	// welcome, user-42
	// ran
	// duplicate
}

// Without a ServeMux, the middleware wraps a handler. Copies of one task run
// it once.
func ExampleNewMiddleware() {
	guard, err := core.New(memstore.New(), nil) // redisstore in production
	if err != nil {
		log.Fatal(err)
	}
	mw, err := asynqonce.NewMiddleware(guard, nil)
	if err != nil {
		log.Fatal(err)
	}
	h := mw(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		fmt.Printf("welcome, %s\n", t.Payload())
		return nil
	}))
	for range 3 {
		err := h.ProcessTask(context.Background(), asynq.NewTask("email:welcome", []byte("user-42")))
		fmt.Println(err)
	}
	// Output:
	// welcome, user-42
	// <nil>
	// <nil>
	// <nil>
}

// A key from a header rather than the payload: two tasks for one order charge
// it once, and a task reusing the key with another payload is a conflict,
// archived at once through asynq.SkipRetry.
func ExampleConfig_key() {
	guard, err := core.New(memstore.New(), nil)
	if err != nil {
		log.Fatal(err)
	}
	cfg := &asynqonce.Config{Key: func(t *asynq.Task) string { return "charge:" + t.Headers()["order"] }}
	h := asynqonce.MustMiddleware(guard, cfg)(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		fmt.Printf("charged %s\n", t.Payload())
		return nil
	}))
	order := map[string]string{"order": "o-7"}
	ctx := context.Background()
	fmt.Println(h.ProcessTask(ctx, asynq.NewTaskWithHeaders("charge", []byte("10 EUR"), order)))
	fmt.Println(h.ProcessTask(ctx, asynq.NewTaskWithHeaders("charge", []byte("10 EUR"), order)))
	err = h.ProcessTask(ctx, asynq.NewTaskWithHeaders("charge", []byte("99 EUR"), order))
	fmt.Println(errors.Is(err, core.ErrConflict), errors.Is(err, asynq.SkipRetry))
	// Output:
	// charged 10 EUR
	// <nil>
	// <nil>
	// true true
}

// A copy that finds its job running is not a failure, and is retried after
// the claim's remaining lease.
func ExampleRetryDelay() {
	running := &core.RunningError{RetryAfter: 3 * time.Second}
	fmt.Println(asynqonce.IsFailure(running), asynqonce.RetryDelay(0, running, nil))
	// Output:
	// false 3s
}

// A policy of your own for the other errors: RetryDelayOr keeps the running
// claim's hint for the copies that found their job running.
func ExampleRetryDelayOr() {
	delay := asynqonce.RetryDelayOr(func(n int, err error, t *asynq.Task) time.Duration {
		return time.Duration(n+1) * time.Minute
	})
	running := &core.RunningError{RetryAfter: 3 * time.Second}
	fmt.Println(delay(0, running, nil), delay(2, errors.New("smtp: 421"), nil))
	// Output:
	// 3s 3m0s
}

// SetResult hands a result to the middleware: it is written to the task's
// ResultWriter and stored with the done marker, and duplicates write the
// same bytes to theirs.
func ExampleSetResult() {
	guard, err := core.New(memstore.New(), nil)
	if err != nil {
		log.Fatal(err)
	}
	h := asynqonce.MustMiddleware(guard, nil)(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		return asynqonce.SetResult(ctx, []byte("receipt-1"))
	}))
	fmt.Println(h.ProcessTask(context.Background(), asynq.NewTask("pay", []byte("invoice-9"))))

	// Outside the middleware there is nothing to store the result with.
	err = asynqonce.SetResult(context.Background(), []byte("receipt-1"))
	fmt.Println(errors.Is(err, asynqonce.ErrNoTask))
	// Output:
	// <nil>
	// true
}

// EnqueueOnce enqueues a key at most once per window.
func ExampleEnqueueOnce() {
	rdb := exampleRedis()
	defer rdb.Close()
	guard := exampleGuard(rdb, nil)
	queue, deleteQueue := exampleQueue(rdb)
	defer deleteQueue()
	client := asynq.NewClientFromRedisClient(rdb)
	defer client.Close()

	task := asynq.NewTask("report:daily", []byte("2026-11-29"))
	for range 2 {
		_, err := asynqonce.EnqueueOnce(context.Background(), guard, client, task, "report:2026-11-29", 24*time.Hour,
			asynq.Queue(queue))
		switch {
		case errors.Is(err, asynqonce.ErrAlreadyEnqueued):
			fmt.Println("already enqueued today")
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Println("enqueued")
		}
	}
	// Output:
	// enqueued
	// already enqueued today
}

// exampleRedis returns a client for the Redis the examples run against.
func exampleRedis() *redis.Client {
	opt, err := redis.ParseURL(testenv.RedisURL())
	if err != nil {
		log.Fatal(err)
	}
	opt.ContextTimeoutEnabled = true // calls end with their context
	return redis.NewClient(opt)
}

// exampleGuard returns a Guard on rdb with cfg and a key prefix of its own
// for each run of an example, so that examples run again start afresh.
func exampleGuard(rdb *redis.Client, cfg *core.Config) *core.Guard {
	store, err := redisstore.New(rdb, nil)
	if err != nil {
		log.Fatal(err)
	}
	var c core.Config
	if cfg != nil {
		c = *cfg
	}
	c.KeyPrefix = "example:" + testenv.RandomID(8) + ":"
	guard, err := core.New(store, &c)
	if err != nil {
		log.Fatal(err)
	}
	return guard
}

// exampleQueue returns an Asynq queue name of its own, and a function that
// deletes the queue.
func exampleQueue(rdb *redis.Client) (string, func()) {
	queue := "example-" + testenv.RandomID(6)
	return queue, func() {
		inspector := asynq.NewInspectorFromRedisClient(rdb)
		_ = inspector.DeleteQueue(queue, true)
		_ = inspector.Close()
	}
}
