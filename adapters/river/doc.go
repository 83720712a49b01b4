// Package riveronce runs River jobs once per key. It offers a worker
// middleware for a whole client, a wrapper for one worker, and a
// transactional form that makes a job's database effect exactly-once.
//
//	import riveronce "github.com/jobonce/jobonce/adapters/river"
//
// # Setup
//
// NewMiddleware guards every job of a client. Put it in
// river.Config.Middleware:
//
//	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
//		Middleware: []rivertype.Middleware{riveronce.MustMiddleware(guard, nil)},
//		Queues:     map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 100}},
//		Workers:    workers,
//	})
//
// Wrap guards one worker instead. WrapTx commits the key's record, the
// job's effect and its completion in one transaction.
//
// # Keys and outcomes
//
// A job's default key is its kind and a hash of its args. A job inserted
// again with the same args within the Guard's Retention is skipped as a
// copy. Each occurrence of a River periodic job runs. For work that repeats
// on purpose, give the args a OnceKey method (Keyer), or set Config.Key or
// Config.Unguarded.
//
// Each outcome maps to River's own control flow. A job that ran or was done
// already completes. A copy of a running job waits for it, or snoozes, using no attempt. A
// conflict or an empty key cancels the job. A store failure is an ordinary
// error, which River retries.
//
// docs/river.md explains keys, periodic jobs, rescues and the
// transactional mode.
package riveronce
