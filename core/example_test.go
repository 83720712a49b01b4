package core_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/memstore"
)

// newGuard returns a Guard on an in-process store; in production, pass a
// redisstore or pgstore Store to core.New.
func newGuard(cfg *core.Config) *core.Guard {
	guard, err := core.New(memstore.New(), cfg)
	if err != nil {
		log.Fatal(err)
	}
	return guard
}

// The same job delivered twice runs once: the second copy is a duplicate,
// acknowledged with a nil error.
func ExampleGuard_Do() {
	guard := newGuard(nil)
	ctx := context.Background()
	send := func(context.Context) error {
		fmt.Println("sending the welcome email")
		return nil
	}
	for range 2 {
		out, err := guard.Do(ctx, "email:welcome:user-42", send)
		fmt.Println(out, err)
	}
	// Output:
	// sending the welcome email
	// ran <nil>
	// duplicate <nil>
}

// A copy delivered while the job runs does not run it either: it gets a
// *RunningError telling it when to come back.
func ExampleGuard_Do_running() {
	guard := newGuard(nil) // Lease 30s, so RetryAfter is capped at Lease/3
	ctx := context.Background()
	_, err := guard.Do(ctx, "report:2026-11", func(ctx context.Context) error {
		// A second copy arrives while the first one runs.
		out, err := guard.Do(ctx, "report:2026-11", func(context.Context) error { return nil })
		after, _ := core.RetryAfter(err)
		fmt.Println(out, errors.Is(err, core.ErrRunning), after)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// running true 10s
}

// A failure releases the key at once, so the retry runs the job.
func ExampleGuard_Do_failure() {
	guard := newGuard(nil)
	ctx := context.Background()
	attempt := 0
	charge := func(context.Context) error {
		attempt++
		if attempt == 1 {
			return errors.New("payment provider timed out")
		}
		fmt.Println("charged on attempt", attempt)
		return nil
	}
	for range 3 { // the queue delivers until the job succeeds, and once more
		out, err := guard.Do(ctx, "charge:order-7", charge)
		fmt.Println(out, err)
	}
	// Output:
	// failed payment provider timed out
	// charged on attempt 2
	// ran <nil>
	// duplicate <nil>
}

// Run stores the job's result with its done marker and hands it to the
// duplicates; the fingerprint catches another payload reusing the key.
func ExampleGuard_Run() {
	guard := newGuard(nil)
	ctx := context.Background()
	job := core.Job{Key: "charge:order-7", Fingerprint: core.Fingerprint([]byte(`{"cents":1299}`))}
	charge := func(context.Context) ([]byte, error) { return []byte("receipt-31"), nil }

	for range 2 {
		res, err := guard.Run(ctx, job, charge)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(res.Outcome, string(res.Value))
	}

	// Another payload under the same key is a bug upstream.
	other := core.Job{Key: "charge:order-7", Fingerprint: core.Fingerprint([]byte(`{"cents":1}`))}
	res, err := guard.Run(ctx, other, charge)
	fmt.Println(res.Outcome, errors.Is(err, core.ErrConflict))
	// Output:
	// ran receipt-31
	// duplicate receipt-31
	// conflict true
}

// Enqueue publishes a job at most once per key within a window.
func ExampleGuard_Enqueue() {
	guard := newGuard(nil)
	publish := func(context.Context) error {
		fmt.Println("published")
		return nil
	}
	for range 2 {
		ok, err := guard.Enqueue(context.Background(), "report:2026-11", time.Hour, publish)
		fmt.Println(ok, err)
	}
	// Output:
	// published
	// true <nil>
	// false <nil>
}

// A consumer that receives jobs in batches claims a whole batch at once,
// runs the claimed jobs and records their done markers together.
func ExampleGuard_Claim() {
	guard := newGuard(nil)
	ctx := context.Background()
	// The first job ran before: its copy in the batch is a duplicate.
	if _, err := guard.Do(ctx, "email:1", func(context.Context) error { return nil }); err != nil {
		log.Fatal(err)
	}

	batch := []core.Job{{Key: "email:1"}, {Key: "email:2"}, {Key: "email:3"}}
	claims := guard.Claim(ctx, batch...) // one store round trip on a BatchStore
	for i, c := range claims {
		fmt.Println(batch[i].Key, "runs:", c.Runs())
		_, err := c.Work(ctx, func(context.Context) ([]byte, error) {
			return nil, nil // send the email
		})
		if err != nil {
			log.Print(err) // not handled: leave the delivery to be retried
		}
	}
	// Every claim goes to Finish, which records the pending done markers.
	for i, out := range guard.Finish(ctx, claims...) {
		fmt.Println(batch[i].Key, out)
	}
	// Output:
	// email:1 runs: false
	// email:2 runs: true
	// email:3 runs: true
	// email:1 duplicate
	// email:2 ran
	// email:3 ran
}

// An Observer sees every outcome, for metrics or tests of one's own.
func ExampleConfig_observer() {
	counts := map[core.Outcome]int{}
	guard := newGuard(&core.Config{
		Observer: func(_ context.Context, e core.Event) { counts[e.Outcome]++ }, // must not block
	})
	for range 3 {
		if _, err := guard.Do(context.Background(), "sync:42", func(context.Context) error { return nil }); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println(core.Ran, counts[core.Ran])
	fmt.Println(core.Duplicate, counts[core.Duplicate])
	// Output:
	// ran 1
	// duplicate 2
}

// An external API that accepts idempotency keys gets the job's: every copy
// and retry of the job sends the same one, so the API absorbs a repeat the
// Guard cannot prevent (a crash between the call and the done marker).
func ExampleIdempotencyKey() {
	seen := map[string]int{} // the API's record of the keys it applied
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		if seen[key]++; seen[key] > 1 {
			w.WriteHeader(http.StatusConflict) // already applied: absorbed
		}
	}))
	defer api.Close()

	charge := func(ctx context.Context) error {
		key, _ := core.IdempotencyKey(ctx)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, api.URL+"/v1/charges", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		fmt.Println("charge:", resp.StatusCode, len(key), "character key")
		return nil
	}
	// Two workers whose done markers were lost (two stores standing for a
	// crash after the call) run the job twice; the API applies it once.
	for range 2 {
		if _, err := newGuard(nil).Do(context.Background(), "charge:order-42", charge); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("applied:", len(seen))
	// Output:
	// charge: 200 30 character key
	// charge: 409 30 character key
	// applied: 1
}
