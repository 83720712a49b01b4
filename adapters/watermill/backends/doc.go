// Package backends holds the Watermill adapter's tests that run on real
// brokers through their Watermill Pub/Subs (watermill-redisstream,
// watermill-amqp on RabbitMQ, watermill-nats on NATS JetStream), the crash
// experiments among them, and the router tests that run on every backend.
// It is a module of its own, so that the brokers' clients, pgx and
// pgstore enter this module's go.mod, never the adapter's, whose users
// would find them in their module graph. It has no code of its own.
package backends
