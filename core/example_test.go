package core_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/memstore"
)

func ExampleGuard_Do() {
	guard, err := core.New(memstore.New(), nil) // redisstore or pgstore in production
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	send := func(context.Context) error { fmt.Println("sending welcome email"); return nil }

	// The same job delivered twice: the second copy is a duplicate.
	for range 2 {
		outcome, err := guard.Do(ctx, "email:welcome:user-42", send)
		fmt.Println(outcome, err)
	}
	// Output:
	// sending welcome email
	// ran <nil>
	// duplicate <nil>
}

func ExampleGuard_Run() {
	guard, _ := core.New(memstore.New(), nil)
	ctx := context.Background()
	job := core.Job{Key: "charge:order-7", Fingerprint: core.Fingerprint([]byte(`{"cents":1299}`))}
	charge := func(context.Context) ([]byte, error) { return []byte("receipt-31"), nil }

	first, _ := guard.Run(ctx, job, charge)
	again, _ := guard.Run(ctx, job, charge)
	fmt.Printf("%s %s\n%s %s\n", first.Outcome, first.Value, again.Outcome, again.Value)

	// Another payload under the same key is a bug upstream.
	_, err := guard.Run(ctx, core.Job{Key: "charge:order-7", Fingerprint: core.Fingerprint([]byte(`{"cents":1}`))}, charge)
	fmt.Println(errors.Is(err, core.ErrConflict))
	// Output:
	// ran receipt-31
	// duplicate receipt-31
	// true
}

func ExampleGuard_Enqueue() {
	guard, _ := core.New(memstore.New(), nil)
	publish := func(context.Context) error { fmt.Println("published"); return nil }
	for range 2 {
		ok, err := guard.Enqueue(context.Background(), "report:2026-11", time.Hour, publish)
		fmt.Println(ok, err)
	}
	// Output:
	// published
	// true <nil>
	// false <nil>
}
