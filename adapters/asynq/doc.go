// Package asynqonce runs each Asynq task once, however many copies are
// delivered, with a jobonce Guard.
//
//	import asynqonce "github.com/jobonce/jobonce/adapters/asynq"
//
// # Setup
//
// Add the middleware to the mux, and set two fields of the server's
// configuration:
//
//	srv := asynq.NewServer(redisOpt, asynq.Config{
//		IsFailure:      asynqonce.IsFailure,
//		RetryDelayFunc: asynqonce.RetryDelay,
//	})
//	mux := asynq.NewServeMux()
//	mux.Use(asynqonce.MustMiddleware(guard, nil))
//
// With these two fields, a copy that finds its job running is not charged a
// retry. It comes back after the Guard's RetryAfter hint. Without them, jobs
// still run once, but such a copy counts as a failed retry. The middleware
// logs a warning once when it sees this, naming the missing field.
//
// # Keys
//
// A task's default key is its type and a hash of its payload. A task
// enqueued again with the same type and payload within the Guard's
// Retention is skipped as a copy. Work that repeats on purpose needs
// Config.Key, Config.PeriodicTypes or Config.UnguardedTypes.
//
// docs/asynq.md describes the outcome of each task, waiting copies,
// cancellation, periodic tasks and EnqueueOnce.
package asynqonce
