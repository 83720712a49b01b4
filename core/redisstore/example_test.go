package redisstore_test

import (
	"context"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// A Guard on Redis: claims and done markers are Redis keys with a TTL.
func Example() {
	opt, err := redis.ParseURL(testenv.RedisURL()) // such as "redis://localhost:6379/0"
	if err != nil {
		log.Fatal(err)
	}
	opt.ContextTimeoutEnabled = true // calls end with their context
	rdb := redis.NewClient(opt)      // or a Sentinel or Cluster client
	defer rdb.Close()

	store, err := redisstore.New(rdb, nil)
	if err != nil {
		log.Fatal(err)
	}
	guard, err := core.New(store, &core.Config{KeyPrefix: exampleRun()})
	if err != nil {
		log.Fatal(err)
	}
	for range 2 { // the job is delivered twice
		out, err := guard.Do(context.Background(), "email:welcome:user-42", func(ctx context.Context) error {
			fmt.Println("sending the email")
			return nil
		})
		fmt.Println(out, err)
	}
	// Output:
	// sending the email
	// ran <nil>
	// duplicate <nil>
}

// A batch of deliveries, as a consumer receives them: one round trip claims
// them all, the claimed jobs run side by side, and one round trip records
// their done markers.
func Example_batch() {
	rdb := exampleClient()
	defer rdb.Close()
	guard, _ := exampleGuard(rdb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// The queue delivered invoice:1 twice in one batch.
	batch := []core.Job{{Key: "invoice:1"}, {Key: "invoice:2"}, {Key: "invoice:3"}, {Key: "invoice:1"}}
	claims := guard.Claim(ctx, batch...)
	var wg sync.WaitGroup
	for _, c := range claims {
		// Work returns at once for a claim that does not run (c.Runs() is
		// false): here the second invoice:1, which finds the first running.
		wg.Go(func() {
			_, _ = c.Work(ctx, func(context.Context) ([]byte, error) {
				return nil, nil // send the invoice
			})
		})
	}
	wg.Wait()
	for i, out := range guard.Finish(ctx, claims...) {
		fmt.Println(batch[i].Key, out)
	}
	// Output:
	// invoice:1 ran
	// invoice:2 ran
	// invoice:3 ran
	// invoice:1 running
}

// exampleClient returns a client for the Redis the examples run against.
func exampleClient() *redis.Client {
	opt, err := redis.ParseURL(testenv.RedisURL())
	if err != nil {
		log.Fatal(err)
	}
	opt.ContextTimeoutEnabled = true
	return redis.NewClient(opt)
}

// exampleGuard returns a Guard on a Store on rdb, with its Store.
func exampleGuard(rdb *redis.Client) (*core.Guard, *redisstore.Store) {
	store, err := redisstore.New(rdb, nil)
	if err != nil {
		log.Fatal(err)
	}
	guard, err := core.New(store, &core.Config{KeyPrefix: exampleRun()})
	if err != nil {
		log.Fatal(err)
	}
	return guard, store
}

// exampleRun returns a key prefix of its own for each run of an example, so
// that examples run again against the same Redis start afresh.
func exampleRun() string { return "example:" + testenv.RandomID(8) + ":" }
