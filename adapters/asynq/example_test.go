package asynqonce_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	asynqonce "github.com/jobonce/jobonce/adapters/asynq"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/core/redisstore"
)

// A server with a ServeMux: one middleware line, and IsFailure and
// RetryDelay in the server's configuration.
func ExampleMiddleware() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	store, err := redisstore.New(rdb, nil)
	if err != nil {
		panic(err)
	}
	guard, err := core.New(store, nil)
	if err != nil {
		panic(err)
	}

	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		IsFailure:      asynqonce.IsFailure,
		RetryDelayFunc: asynqonce.RetryDelay(asynq.DefaultRetryDelayFunc),
	})
	mux := asynq.NewServeMux()
	mux.Use(asynqonce.MustMiddleware(guard, nil))
	mux.HandleFunc("email:welcome", func(ctx context.Context, t *asynq.Task) error {
		fmt.Printf("welcome, %s\n", t.Payload())
		return nil
	})
	if err := srv.Run(mux); err != nil {
		panic(err)
	}
}

// Without a ServeMux, the middleware wraps a handler. Copies of one task run
// it once.
func ExampleMiddleware_handler() {
	guard, _ := core.New(memstore.New(), nil)
	h := asynqonce.MustMiddleware(guard, nil)(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		fmt.Printf("welcome, %s\n", t.Payload())
		return nil
	}))
	ctx := context.Background()
	for range 3 {
		if err := h.ProcessTask(ctx, asynq.NewTask("email:welcome", []byte("user-42"))); err != nil {
			fmt.Println(err)
		}
	}
	// Output:
	// welcome, user-42
}

// A key from a header rather than the payload: two tasks for one order charge
// it once, and a task reusing the key with another payload is a conflict.
func ExampleConfig_key() {
	guard, _ := core.New(memstore.New(), nil)
	cfg := &asynqonce.Config{Key: func(t *asynq.Task) string { return "charge:" + t.Headers()["order"] }}
	h := asynqonce.MustMiddleware(guard, cfg)(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		fmt.Printf("charged %s\n", t.Payload())
		return nil
	}))
	order := map[string]string{"order": "o-7"}
	ctx := context.Background()
	fmt.Println(h.ProcessTask(ctx, asynq.NewTaskWithHeaders("charge", []byte("10 EUR"), order)))
	fmt.Println(h.ProcessTask(ctx, asynq.NewTaskWithHeaders("charge", []byte("10 EUR"), order)))
	err := h.ProcessTask(ctx, asynq.NewTaskWithHeaders("charge", []byte("99 EUR"), order))
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
	delay := asynqonce.RetryDelay(asynq.DefaultRetryDelayFunc)
	running := &core.RunningError{RetryAfter: 3 * time.Second}
	fmt.Println(asynqonce.IsFailure(running), delay(0, running, nil))
	// Output:
	// false 3s
}

// SetResult hands a result to the middleware: it is written to the task's
// ResultWriter and stored, and duplicates write the same bytes.
func ExampleSetResult() {
	guard, _ := core.New(memstore.New(), nil)
	h := asynqonce.MustMiddleware(guard, nil)(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		return asynqonce.SetResult(ctx, []byte("receipt-1"))
	}))
	task := asynq.NewTask("pay", []byte("invoice-9"))
	fmt.Println(h.ProcessTask(context.Background(), task))
	// Output:
	// <nil>
}

// EnqueueOnce enqueues a key at most once per window.
func ExampleEnqueueOnce() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	store, _ := redisstore.New(rdb, nil)
	guard, _ := core.New(store, nil)
	client := asynq.NewClientFromRedisClient(rdb)

	task := asynq.NewTask("report:daily", []byte("2026-11-29"))
	_, err := asynqonce.EnqueueOnce(context.Background(), guard, client, task, "report:2026-11-29", 24*time.Hour)
	if errors.Is(err, asynqonce.ErrAlreadyEnqueued) {
		fmt.Println("already enqueued today")
	}
}
