// Package asynqonce runs each Asynq task once, whatever the number of copies
// delivered, with a jobonce Guard.
//
//	import asynqonce "github.com/jobonce/jobonce/adapters/asynq"
//
// # Setup
//
// One middleware line, and two fields of the server's configuration:
//
//	srv := asynq.NewServer(redisOpt, asynq.Config{
//		IsFailure:      asynqonce.IsFailure,  // without these two, jobs still run once, but
//		RetryDelayFunc: asynqonce.RetryDelay, // a running copy counts as a failed retry
//	})
//	mux := asynq.NewServeMux()
//	mux.Use(asynqonce.MustMiddleware(guard, nil))
//
// Without them, a copy that finds its job running is charged a retry and
// counted as failed, and comes back after Asynq's delay for failures (15s or
// more) rather than after the Guard's RetryAfter hint. The middleware
// notices it when such a copy comes back (charged a retry without IsFailure
// being asked, or more than 7s after its hint without RetryDelay being
// asked), and logs it once at Warn on the Guard's Logger, naming the
// missing field. RetryDelayOr takes a retry
// policy of your own for the other errors.
//
// A task's default key is its type and a hash of its payload, so a task
// enqueued again with the same type and payload within the Guard's Retention
// (24h by default) is skipped as a copy. Work that repeats on purpose takes
// one of these instead (or a Config.Key that names the occurrence):
//
//	mux.Use(asynqonce.MustMiddleware(guard, &asynqonce.Config{PeriodicTypes: []string{"report:daily"}}))   // each task an asynq.Scheduler enqueues runs
//	mux.Use(asynqonce.MustMiddleware(guard, &asynqonce.Config{UnguardedTypes: []string{"cache:refresh"}})) // runs unguarded
//
// MustMiddleware panics on a nil Guard or an invalid Config, at start-up;
// NewMiddleware returns the error instead. Without a ServeMux, wrap the
// handler: mw(h).
//
// # Keys
//
// A task's key names its effect. By default it is the task type, ":" and a
// hash of the payload (DefaultKey; "jobonce key asynq" prints its stored
// key), so copies of one task share a key;
// Config.Key derives it from the type, payload or headers instead. An empty
// key is invalid, as in every jobonce adapter: the handler does not run and
// the task is archived (asynq.SkipRetry), reported as core.Rejected. A type
// in Config.UnguardedTypes runs unguarded, reported as core.Unguarded.
// Copies under one key with different payloads are a conflict: the task is
// archived through asynq.SkipRetry.
//
// A done key skips every later task with that key for the Guard's Retention
// (24h by default). Tasks that legitimately repeat with the same type and
// payload need a key that names the occurrence (a date in the payload,
// say), or a place in Config.UnguardedTypes. Those of an asynq.Scheduler
// (periodic tasks) carry nothing a worker could tell them by: list their
// types in Config.PeriodicTypes, which keys each task by its type, queue and
// task ID (asynq.GetTaskID). Each Scheduler enqueue is a new task with a new
// ID, so each occurrence runs, while Asynq's retries and recoveries of a task
// keep its ID and remain copies. The first copy of each type skipped under
// the default key is logged at Info (with how long after the first copy's
// done marker it came), naming these settings; later ones at Debug.
//
// # Copies that find the job running
//
// One copy of a key waits in its worker slot for the running copy, up to
// Config.WaitRunning, and no more copies than the Guard's
// core.Config.WaitingShare of the tasks in progress. The others return an
// error for which IsFailure reports false, so Asynq retries them without
// charging a retry or counting a failure, after the delay RetryDelay takes
// from the Guard's RetryAfter hint (when the running copy is expected to
// end). Asynq archives a failing task whose retries are used up before it
// asks IsFailure; such a copy (for instance one enqueued with
// asynq.MaxRetry(0)) therefore waits in its worker slot, polling, until the
// other copy is done (it is then acknowledged as a duplicate) or its claim
// lapses (it then runs the job itself), for as long as its task deadline
// allows, whatever the Guard admits: n such copies of one long job hold n
// worker slots while it runs. At Server.Shutdown, a copy still waiting when
// asynq.Config.ShutdownTimeout passes is put back in its queue, uncharged,
// and its context cancelled, which ends the wait (see Cancellation).
//
// Asynq's recoverer re-delivers a task whose worker stopped extending Asynq's
// lease, while that worker may still be running it: the Guard's own lease,
// extended while the handler runs, keeps the new copy out. The recoverer
// archives such a task without running it when its retries are used up, so
// give guarded tasks at least one retry.
//
// # Cancellation
//
// A task whose context ends before its claim is answered (or while it waits
// for a running copy) does not run, even when the Guard fails open; the
// middleware returns an error matching ctx.Err(), outcome core.Canceled,
// never core.ErrStoreUnavailable, and IsFailure reports false for it. Asynq
// itself, though, reports a task whose context ended with the bare context
// error, before the handler returns: a task past its Timeout or Deadline,
// or cancelled through the Inspector or a cancelled asynq.Config.BaseContext,
// is charged a retry (archived when none is left) as Asynq charges any task
// that overran. Server.Shutdown does not cancel contexts: it waits
// ShutdownTimeout, puts unfinished tasks back in their queues without
// charging a retry, then cancels them. So a shutdown costs a task that had
// not started nothing; a cancelled BaseContext would charge it a retry.
//
// # Results
//
// A handler that produces a result calls SetResult instead of writing to the
// ResultWriter: the bytes go to the ResultWriter and are stored with the done
// marker, and duplicates write the same bytes to their own ResultWriter.
//
// # Enqueueing once
//
// EnqueueOnce enqueues a task at most once per key within a window through
// Guard.Enqueue; unlike Asynq's Unique option it takes any key and releases
// the key at once when enqueueing fails. The task's asynq.TaskID names the
// key and its window period (unless you pass your own), so a retry after a
// failure whose task went out anyway (a reply lost to a timeout) finds it in
// the queue and enqueues no second one (ErrAlreadyEnqueued), while a publish
// after the window is a new task with a new ID: listed in
// Config.PeriodicTypes, its type runs once per window even with one payload.
//
// # Group commit
//
// When the Guard's store is a driver.BatchStore (redisstore is), the Guard
// sends the claims and done markers of tasks that run at the same time in
// groups, one store round trip per group (core.Config.DisableGroupCommit
// turns it off). No task waits for a group to fill. Asynq hands tasks out
// one at a time from one dequeue loop, so on a server their calls overlap
// less often than in River or the SQS Poller.
package asynqonce
