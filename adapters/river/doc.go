// Package riveronce runs River jobs once per key: a worker middleware for a
// whole client, a wrapper for one worker, and a transactional form that
// makes a job's database effect exactly-once.
//
//	import riveronce "github.com/jobonce/jobonce/adapters/river"
//
// # Middleware and Wrap
//
// NewMiddleware guards every job of a client; put it in
// river.Config.Middleware:
//
//	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
//		Middleware: []rivertype.Middleware{riveronce.MustMiddleware(guard, nil)},
//		Queues:     map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 100}},
//		Workers:    workers,
//	})
//
// A job's default key is its kind and a hash of its args, so a job inserted
// again with the same args within the Guard's Retention (24h by default) is
// skipped as a copy, while each occurrence of a River periodic job runs. Work
// that repeats on purpose takes one of these instead:
//
//	riveronce.MustMiddleware(guard, &riveronce.Config{Key: func(j *rivertype.JobRow) string { return j.Kind + ":" + strconv.FormatInt(j.ID, 10) }}) // every insert runs once
//	func (a ReportArgs) OnceKey() string { return "report:" + a.Day }                                                                           // the args name their key (Keyer)
//	riveronce.MustMiddleware(guard, &riveronce.Config{Unguarded: func(j *rivertype.JobRow) bool { return j.Kind == "cache_refresh" }})                 // runs unguarded
//
// Wrap guards one worker; register its result with
// river.AddWorker. Each returns an error for a nil argument; MustMiddleware,
// MustWrap and MustWrapTx are their one-line forms, which panic with it. Both
// claim the job's key through a core.Guard before the worker runs, keep the
// claim alive with the guard's heartbeat while it runs, and record a done
// marker when it succeeds. Wrap keeps the inner worker's Timeout, NextRetry
// and Middleware.
//
// A worker registered with Wrap on a client with the middleware is guarded by
// Wrap alone, with Wrap's Config and the key its decoded args give: Wrap puts
// a worker middleware of its own before the worker's, River runs a worker's
// middleware around the client's, and that mark tells the middleware to
// leave the job to Wrap. So the key a Wrap declares (OnceKey, say) wins over
// the one the middleware would see (kind and args hash, for a job inserted by
// a client without the middleware), and each job is claimed once. Should a
// Wrap still run inside a middleware's claim of the same job (its Work called
// from your own middleware), it claims its own key too when that differs, and
// the inner claim decides; a key the job holds already is never claimed again.
//
// # Outcomes
//
// Each outcome maps to River's own control flow:
//
//   - ran, or done already (a duplicate copy): nil, and River completes the
//     job;
//   - another copy holds the key: the copy waits for its outcome, up to
//     Config.WaitRunning, when the guard lets it (one copy of a key, and
//     no more than core.Config.WaitingShare of the jobs in progress), and
//     completes as a duplicate or runs; otherwise, or still running,
//     river.JobSnooze(RetryAfter), where RetryAfter is when the running
//     copy is expected to end (once the guard has seen five runs of the
//     kind), else its claim's remaining lease, bounded by the guard's
//     MinRetryAfter and MaxRetryAfter (lower MaxRetryAfter to have copies
//     check back sooner; snoozes longer than 5s wait for River's scheduler to
//     make the job available again). River gives a
//     snoozed job its attempt back (Attempt is decremented before the job is
//     rescheduled, and the next fetch increments it again), so however often
//     a copy snoozes it never reaches MaxAttempts; River counts snoozes in the
//     job's metadata ("snoozes");
//   - conflict (the key is held or done with a different payload
//     fingerprint) or an empty key: river.JobCancel, since no retry can help;
//   - the store cannot be reached: the worker does not run (fail closed) and
//     an ordinary error matching core.ErrStoreUnavailable goes back, so River
//     retries the job under its retry policy, using an attempt each time;
//   - the job's context ends before the claim is answered (River cancels it
//     at the worker's JobTimeout and when the client stops with
//     StopAndCancel): the worker does not run, even when the guard fails
//     open, and an error matching ctx.Err() goes back (outcome
//     core.Canceled), never core.ErrStoreUnavailable and never JobCancel.
//     River makes a job its client's stop interrupted available again
//     without using an attempt, and retries one past its JobTimeout as a
//     failed attempt. WrapTx does the same when the context ends before the
//     key is recorded;
//   - the worker fails or panics: the claim is released at once and the error
//     (or panic) reaches River unchanged.
//
// # Keys
//
// The key names the job's effect. It is, in order: Config.Key(job) if set;
// the args' OnceKey() if they implement Keyer (Wrap sees the decoded args;
// for Middleware, the same value acting as insert middleware records OnceKey
// in the job's metadata under MetadataKey when the job is inserted); else,
// for a job River's periodic job enqueuer inserted, a key naming its
// occurrence (see Periodic jobs); else Kind + ":" + core.Fingerprint(encoded
// args), so copies with equal args share a key. A named key (Config.Key,
// Keyer) is checked against the payload fingerprint, core.Fingerprint(encoded
// args) unless Config.Fingerprint says otherwise: different args under one
// key are a conflict. The default keys store none: Kind and the fingerprint
// contains it already, and a periodic occurrence is one job whatever its
// args. DefaultKey computes a job's key from its row, and "jobonce key
// river" its stored key, to inspect it.
//
// The first copy of each kind skipped under Kind and the args' fingerprint is
// logged at Info (with how long after the first copy's done marker it came),
// naming the settings above; later ones at Debug.
//
// # Periodic jobs
//
// River's periodic job enqueuer inserts each occurrence of a river.PeriodicJob
// as a new job, marked "periodic" in its metadata (and
// "river:periodic_job_id" when the periodic job has an ID), with its
// ScheduledAt at the occurrence's time (the moment of the leader's start for
// RunOnStart). Each occurrence runs, even with constant args. The middleware,
// acting as insert middleware on the inserting client (the leader), records
// that time in the job's metadata ("jobonce_occurrence": UTC, to the
// microsecond), since River moves a job's ScheduledAt on every snooze, retry
// and rescue; the default key is then Kind, ":periodic:", the periodic job's
// ID and the time, or without an ID the time and the args' fingerprint (which
// tells apart periodic jobs of one kind due at once). A copy of an occurrence
// (the job rescued or retried, or the occurrence inserted again by a new
// leader at the same time, as a cron schedule or River Pro's durable
// periodic jobs do) shares the key; another occurrence does not. A periodic
// job inserted by a client without the middleware is keyed by its own ID
// (Kind, ":periodic:job:" and the job ID), which its retries and rescues
// keep, so every such job runs once; so is one whose metadata holds an
// occurrence that is not an RFC 3339 string or a periodic job ID that is
// not a string, logged once at Warn on the Guard's Logger (at insert, the
// middleware overwrites such an occurrence). Config.Key, Keyer and a key
// recorded at insert still come first.
//
// # Rescued jobs
//
// River has no heartbeat of its own: its rescuer puts a job that has been
// running longer than Config.RescueStuckJobsAfter back in the queue even when
// its worker is alive (say, blocked in a call that ignores its context after
// JobTimeout). The guard's lease is heartbeated, so the rescued copy finds the
// key running and snoozes until the first copy finishes, then completes as a
// duplicate. A rescue counts as an attempt in River. After a crash, the dead
// worker's claims expire with the guard's Lease and the rescued copies run.
//
// # Group commit
//
// When the guard's store is a driver.BatchStore (redisstore, pgstore), the
// claims and done markers of concurrent jobs share store round trips
// (core.Config.DisableGroupCommit turns it off). No job waits for a batch to
// fill: up to four round trips are in flight, a claim or marker that finds
// one free goes at once, and only those that find all four busy go together
// in the next to end.
//
// # Exactly once in one transaction
//
// WrapTx (and WorkTx, for use inside a worker's own Work) take the
// transactional mode of a Guard on a pgstore.Store (core.NewTxGuard): it
// opens a transaction, records the key in it, runs the worker's WorkTx in it,
// mark the job completed in it with river.JobCompleteTx, and commit. The
// record, the effect and the completion are durable together or not at all:
// a crash anywhere, even between the effect and the completion, leaves either
// all of them or none, and a later copy runs. This needs PostgreSQL only. A
// copy that meets the record of a transaction still open snoozes; a copy that
// finds it committed completes without running. The outcomes are the
// Guard's, logged, counted and observed as its own. Do not guard such jobs
// with the middleware as well (exclude them with Config.Unguarded): the worker
// returns ErrGuardedTwice.
package riveronce
