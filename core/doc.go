// Package core runs each job once on top of queues that deliver at least
// once.
//
//	import "github.com/jobonce/jobonce/core"
//
// A Guard claims a job's key in a store, runs the job, then records a done
// marker. A later copy of the job finds the marker and does not run:
//
//	guard, err := core.New(memstore.New(), nil) // redisstore, pgstore or dynamostore in production
//	if err != nil {
//		return err
//	}
//	_, err = guard.Do(ctx, "email:welcome:user-42", sendWelcome)
//	return err // nil: acknowledge the delivery; else the queue retries it
//
// # Claim, run, complete
//
// A key names the effect, not the message. Its claim holds a lease, which a
// heartbeat renews while the job runs. Success turns the claim into a done
// marker, kept for Config.Retention. A failure or a panic releases the
// claim, so a retry runs at once. A crashed worker's claim expires with its
// lease.
//
// A copy that finds the job done gets Duplicate and a nil error. A copy that
// finds it running gets a *RunningError, or first waits (Job.WaitUntil).
// When the store fails, the job does not run: the Guard fails closed.
//
// # More
//
// NewTxGuard commits a job's database writes with its key. Guard.Claim and
// Guard.Finish serve batch consumers. Guard.Enqueue publishes a job at most
// once per key and window. docs/semantics.md explains the outcomes and
// lists the metrics. docs/operations.md explains the alert rules and the
// dashboard in monitoring/, and docs/stores.md the settings and the stores.
// Package core/driver is the contract a store implements.
package core
