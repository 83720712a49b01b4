// Command watermill shows jobonce on a Watermill router: every message is
// published twice, as a producer's retry may, and its handler runs once.
//
// It uses Watermill's in-process GoChannel pub/sub (any backend behaves the
// same) and keeps its claims in the Redis at REDIS_URL (default
// redis://127.0.0.1:6379/0).
//
//	go -C examples run ./watermill
package main

import (
	"cmp"
	"context"
	"fmt"
	"log"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/redis/go-redis/v9"

	watermillonce "github.com/jobonce/jobonce/adapters/watermill"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/redisstore"
)

const jobs = 20

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opt, err := redis.ParseURL(cmp.Or(os.Getenv("REDIS_URL"), "redis://127.0.0.1:6379/0"))
	if err != nil {
		return fmt.Errorf("REDIS_URL: %w", err)
	}
	opt.ContextTimeoutEnabled = true // calls end with their context, not after ReadTimeout
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	store, err := redisstore.New(rdb, nil)
	if err != nil {
		return err
	}
	var ran, duplicates atomic.Int64
	settled := make(chan struct{}, 2*jobs)
	observe := func(_ context.Context, e core.Event) {
		switch e.Outcome {
		case core.Ran:
			ran.Add(1)
		case core.Duplicate:
			duplicates.Add(1)
		default:
			return // running: the copy waits, and settles later
		}
		settled <- struct{}{}
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	guard, err := core.New(store, &core.Config{KeyPrefix: "jobonce-example:" + run + ":", Observer: observe})
	if err != nil {
		return err
	}

	pubSub := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 2 * jobs}, watermill.NopLogger{})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	router.AddMiddleware(watermillonce.MustMiddleware(guard, nil))
	var effects atomic.Int64
	router.AddConsumerHandler("welcome", "signups", pubSub, func(msg *message.Message) error {
		effects.Add(1) // send the welcome email: once per message
		return nil
	})
	routerDone := make(chan error, 1)
	go func() { routerDone <- router.Run(ctx) }()
	select {
	case <-router.Running():
	case err := <-routerDone:
		return err
	}

	for i := range jobs {
		msg := message.NewMessage(watermill.NewUUID(), message.Payload("user-"+strconv.Itoa(i)))
		for range 2 { // the producer's retry sends it again
			if err := pubSub.Publish("signups", msg.Copy()); err != nil {
				return err
			}
		}
	}
	for range 2 * jobs {
		select {
		case <-settled:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the deliveries to settle: %w", ctx.Err())
		}
	}
	if err := router.Close(); err != nil {
		return err
	}
	fmt.Printf("%d messages published twice: the handler ran %d times, %d copies were acknowledged as duplicates\n",
		jobs, effects.Load(), duplicates.Load())
	if effects.Load() != jobs {
		return fmt.Errorf("%d effects for %d messages", effects.Load(), jobs)
	}
	return nil
}
