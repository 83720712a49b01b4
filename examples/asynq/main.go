// Command asynq runs an Asynq producer and server with jobonce: every welcome
// email is enqueued twice, as an at-least-once producer would, and each is
// sent once. The producer also shows EnqueueOnce, which enqueues a key at most
// once per window.
//
//	go -C examples run ./asynq
//
// It needs a Redis: REDIS_URL, by default redis://127.0.0.1:6379/0. It uses
// a queue and key prefix of its own and deletes them when it ends.
package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	asynqonce "github.com/jobonce/jobonce/adapters/asynq"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/redisstore"
)

func main() {
	users := flag.Int("users", 20, "welcome emails to enqueue, each twice")
	flag.Parse()
	if err := run(*users); err != nil {
		log.Fatal(err)
	}
}

func run(users int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := cmp.Or(os.Getenv("REDIS_URL"), "redis://127.0.0.1:6379/0")
	opt, err := redis.ParseURL(url)
	if err != nil {
		return fmt.Errorf("REDIS_URL: %w", err)
	}
	opt.ContextTimeoutEnabled = true // calls end with their context, not after ReadTimeout
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis at %s: %w", url, err)
	}
	redisOpt, err := asynq.ParseRedisURI(url)
	if err != nil {
		return err
	}
	id := randomID()
	queue, prefix := "jobonce-example-"+id, "jobonce-example:"+id+":"

	// The Guard: claims and done markers in Redis.
	store, err := redisstore.New(rdb, nil)
	if err != nil {
		return err
	}
	guard, err := core.New(store, &core.Config{KeyPrefix: prefix})
	if err != nil {
		return err
	}
	defer cleanup(rdb, redisOpt, queue, prefix)

	// The server: one middleware line, IsFailure and RetryDelay. A copy that
	// finds its email being sent waits up to a second for it (WaitRunning),
	// rather than going back to Asynq to be retried after the claim's lease.
	var sent atomic.Int64
	mux := asynq.NewServeMux()
	mux.Use(asynqonce.MustMiddleware(guard, &asynqonce.Config{WaitRunning: time.Second}))
	mux.HandleFunc("email:welcome", func(ctx context.Context, t *asynq.Task) error {
		time.Sleep(20 * time.Millisecond) // talking to the mail provider
		sent.Add(1)
		fmt.Printf("sent welcome email to %s\n", t.Payload())
		return asynqonce.SetResult(ctx, []byte("message-id-"+string(t.Payload())))
	})
	mux.HandleFunc("report:daily", func(context.Context, *asynq.Task) error { return nil })
	srv := asynq.NewServer(redisOpt, asynq.Config{
		Concurrency:              8,
		Queues:                   map[string]int{queue: 1},
		IsFailure:                asynqonce.IsFailure,
		RetryDelayFunc:           asynqonce.RetryDelay,
		DelayedTaskCheckInterval: time.Second,
		LogLevel:                 asynq.WarnLevel,
	})
	if err := srv.Start(mux); err != nil {
		return err
	}
	defer srv.Shutdown()

	// The producer: every email twice, back to back.
	client := asynq.NewClient(redisOpt)
	defer client.Close()
	for i := range users {
		task := asynq.NewTask("email:welcome", fmt.Appendf(nil, "user-%d", i))
		for range 2 {
			if _, err := client.EnqueueContext(ctx, task, asynq.Queue(queue)); err != nil {
				return err
			}
		}
	}
	// EnqueueOnce: the second call finds the key enqueued within the window.
	report := asynq.NewTask("report:daily", []byte("2026-11-29"))
	for range 2 {
		_, err := asynqonce.EnqueueOnce(ctx, guard, client, report, "report:2026-11-29", time.Hour, asynq.Queue(queue))
		switch {
		case errors.Is(err, asynqonce.ErrAlreadyEnqueued):
			fmt.Println("daily report already enqueued")
		case err != nil:
			return err
		default:
			fmt.Println("daily report enqueued")
		}
	}
	inspector := asynq.NewInspector(redisOpt)
	defer inspector.Close()
	for {
		qi, err := inspector.GetQueueInfo(queue)
		if err != nil {
			return err
		}
		if qi.Pending+qi.Active+qi.Scheduled+qi.Retry == 0 {
			fmt.Printf("%d tasks enqueued for %d users: %d emails sent, %d archived\n",
				2*users, users, sent.Load(), qi.Archived)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("queue did not drain: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func cleanup(rdb *redis.Client, redisOpt asynq.RedisConnOpt, queue, prefix string) {
	ctx := context.Background()
	inspector := asynq.NewInspector(redisOpt)
	defer inspector.Close()
	_ = inspector.DeleteQueue(queue, true)
	iter := rdb.Scan(ctx, 0, prefix+"*", 100).Iterator()
	for iter.Next(ctx) {
		rdb.Del(ctx, iter.Val())
	}
}

func randomID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
