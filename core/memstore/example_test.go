package memstore_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/memstore"
)

// A Guard in process memory, for tests and single-process programs: the
// claims are gone when the process exits.
func ExampleNew() {
	store := memstore.New()
	guard, err := core.New(store, nil)
	if err != nil {
		log.Fatal(err)
	}
	for range 2 { // the job is delivered twice
		out, err := guard.Do(context.Background(), "email:welcome:user-42", func(context.Context) error {
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
