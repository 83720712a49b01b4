// Package core gives "run each job once" semantics on top of queues that
// deliver at least once.
//
//	import "github.com/jobonce/jobonce/core"
//
// # Claim, run, complete
//
// Guard.Do claims a key in one atomic store round trip, with a random token
// and a lease. The copy that claims runs the job; while it runs, a heartbeat
// extends the lease every Lease/3, so a long job stays exclusive, and a lost
// lease cancels the job's context with cause ErrLeaseLost. Success replaces
// the claim with a done marker kept for the retention window; failure or a
// panic releases the claim at once so a retry can run. A crashed worker's
// claim simply expires with its lease, so a later copy runs: nothing is lost.
//
// Other copies never run the job: a copy that finds the key running gets a
// *RunningError (ErrRunning) with a RetryAfter hint, and the framework
// adapters turn it into their "try again later, not a failure"; a copy that
// finds it done gets outcome Duplicate and a nil error, so it is acknowledged.
//
// # Waiting for a running copy
//
// A copy whose Job.WaitUntil is set and that finds its job running waits
// for the running copy's outcome instead, up to WaitUntil: the store's
// completion signal (driver.Notifier) wakes it the moment the done marker
// is written (a Duplicate) or the claim released (the copy claims the key
// and runs the job), so a duplicate settles within milliseconds rather
// than a framework's retry delay later. The adapters set it, a few seconds
// ahead and within the delivery's own deadline. A copy of a kind expected
// to run past WaitUntil (its claim's age against the 90th percentile of the
// kind's last runs in this Guard) returns Running at once. The copies of a
// Guard that wait share one listener, which the first opens; it closes a
// minute after the last one left, or at Guard.Close, or once the Guard is
// garbage collected, ending its goroutines. Each copy reads its key a few
// times however many wait beside it. A store notifies only
// a claim that a waiting copy marked, so nothing is paid while nobody
// waits; a notification that is lost costs latency, never correctness, as
// a waiting copy reads its key again by its own deadline. A store that does
// not notify is polled. The transactional mode does not wait.
//
// # Keys
//
// A key names the effect ("email:welcome:user-42"), not the message, so two
// messages that should cause one effect share a key. Any bytes are allowed;
// keys longer than MaxKeyLen are hashed. An empty key is ErrInvalidKey.
//
// # Failure modes
//
// When the store cannot be reached the Guard fails closed: the job does not
// run and the error matches ErrStoreUnavailable, so the framework retries it
// later. Config.FailOpen runs it unguarded instead, only when the store
// could not be reached, never when it answered with an error. When the job
// succeeded but its done marker could not be written (lease lost, or the
// store failed after retries), the effect happened, so Do reports success
// with outcome LeaseLost or Unrecorded, logged as a warning and counted.
// Guard.Ready tells a health or readiness check whether the store can be
// used now: ErrStoreUnavailable when it cannot be reached, ErrStoreRisk when
// a strict store's settings can lose done markers.
//
// # Inside a job
//
// A job's function gets, from its context, IdempotencyKey, the same for
// every copy and retry of the job, for an external API that accepts one;
// and Fence, its claim's fencing token, larger than that of every earlier
// claim of the key, for a store that should refuse the late write of a copy
// whose claim lapsed.
//
// # Rolling out
//
// Config.Shadow makes the Guard claim and record as usual but run every
// delivery, counting in jobonce.shadow.skips what enforcement would skip.
//
// # Exactly once for database effects
//
// NewTxGuard gives a Guard whose store records keys inside transactions
// (pgstore, for pgx.Tx) its transactional mode: TxGuard.Do records the key
// and runs the job in one transaction of its own, then commits, so the
// record and the job's writes become durable together or not at all.
//
// # Batch consumers
//
// A consumer that receives jobs in batches (the SQS Poller, a Kafka or NATS
// consumer) claims a batch in one store round trip with Guard.Claim, runs
// the claims whose Runs reports true with Claim.Work, and records their done
// markers in one more round trip with Guard.Finish.
//
// # Observing
//
// Every outcome, of leased claims and of the transactional mode alike, goes
// to Config.Observer, to log/slog, and to OpenTelemetry metrics: counters
// of outcomes, histograms of run durations, duplicate lags and waits, the
// claims held and the copies waiting in this process, with the attributes
// outcome, jobonce.source, jobonce.kind and jobonce.consumer, and the
// Guard's Lease and Retention (docs/semantics.md lists them with their
// buckets). A nil error means the delivery is handled and can be
// acknowledged; every other outcome comes with an error.
//
// # Stores
//
// A store implements the driver.Store interface (package core/driver, for
// store implementers): four atomic operations, Claim, Extend, Complete and
// Release, plus batches (driver.BatchStore), transactions (driver.TxStore)
// and the completion signal (driver.Notifier) where it can. Implementations: core/redisstore (Redis,
// Sentinel, Cluster), core/pgstore (PostgreSQL, with the transactional mode)
// and core/memstore (in-process). core/storetest is the conformance suite
// every store passes.
package core
