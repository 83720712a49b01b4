// Package watermillonce runs each Watermill message's job once per handler,
// however many copies are delivered, with a jobonce Guard. It offers a
// handler middleware for a router, and a publisher decorator that publishes
// each message once. It works the same on every Watermill backend.
//
//	import watermillonce "github.com/jobonce/jobonce/adapters/watermill"
//
// # Setup
//
// Add the middleware to a router, and decorate the router's publisher. The
// recommended order is:
//
//	poisonQueue, err := middleware.PoisonQueueWithFilter(pub, "poison", watermillonce.IsPoison)
//	…
//	router.AddMiddleware(
//		middleware.CorrelationID,
//		poisonQueue,
//		watermillonce.MustMiddleware(guard, nil),
//		middleware.Timeout(time.Minute),
//		middleware.Retry{MaxRetries: 3, InitialInterval: 100 * time.Millisecond}.Middleware,
//		middleware.Recoverer,
//	)
//	router.AddPublisherDecorators(func(pub message.Publisher) (message.Publisher, error) {
//		return watermillonce.NewPublisher(guard, pub, nil)
//	})
//
// The poison queue goes outside the middleware, with IsPoison as its
// filter. Retry goes inside, so that a handler's retries run under one
// claim.
//
// # Keys
//
// A message's default key is the handler's name, the subscribed topic and
// a hash of the payload. So each handler runs a message once, under a key
// of its own. A message sent again with an equal payload within the Guard's
// Retention is skipped as a copy. Messages that repeat on purpose need
// Config.Key, such as the UUID, or Config.Unguarded.
//
// docs/watermill.md explains what happens to a message, the order of the
// middleware, produced messages and redelivery on each backend.
package watermillonce
