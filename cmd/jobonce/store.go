package main

import (
	"cmp"
	"context"
	"errors"
	"os"
	"time"

	"github.com/jobonce/jobonce/core/driver"
)

// record is what a store holds for a stored key, as inspect reads it.
type record struct {
	// State is StateRunning or StateDone; zero when the key is absent.
	State driver.State
	// Token is a running claim's token.
	Token driver.Token
	// Fence is a running claim's fence (the server's clock when it was
	// taken, in microseconds); zero for a claim written before fences.
	Fence int64
	// Fingerprint is the payload fingerprint kept with the claim or marker.
	Fingerprint string
	// Result is a done marker's stored result.
	Result []byte
	// TTL is a claim's lease left, or a done marker's retention left.
	TTL time.Duration
	// Age is how long a running claim has been held, by its fence and the
	// server's clock; zero without a fence.
	Age time.Duration

	// expired is the row of an absent key on PostgreSQL, where an expired
	// row stays until Prune deletes it; nil when there is none.
	expired *expiredRow
	// value is the Redis value as read, which forget deletes only while
	// the key still holds it.
	value string
	// expiresAt and rowFence identify a PostgreSQL row as read, which
	// forget ends only while the key's row still has them.
	expiresAt time.Time
	rowFence  *int64
}

// expiredRow is an expired PostgreSQL row.
type expiredRow struct {
	done bool          // a done marker's; else a claim's
	ago  time.Duration // how long ago it expired
}

// keyStore is the store the commands act on: Redis or PostgreSQL.
type keyStore interface {
	claimStore
	// forget deletes key's done marker if the key still holds rec, the
	// marker as inspected, in one step; it reports false, deleting
	// nothing, when the key holds anything else or nothing.
	forget(ctx context.Context, key string, rec record) (bool, error)
	// list reads the running claims, and the done markers, under a prefix,
	// within o's bounds.
	list(ctx context.Context, o listOptions) (listing, error)
	// where names the store and its table or database, for messages.
	where() string
	// databaseHint names the flags that pick the Guard's database or
	// table, for the hint of an absent key.
	databaseHint() string
	close()
}

// claimStore is what release needs of a store.
type claimStore interface {
	// inspect reads key without changing it.
	inspect(ctx context.Context, key string) (record, error)
	// release deletes key's running claim if token still holds it, and
	// returns an error matching core.ErrLeaseLost when it does not.
	release(ctx context.Context, key string, token driver.Token) error
	// name is the store's kind: "Redis" or "PostgreSQL".
	name() string
}

// The stores' defaults: redisstore's and pgstore's.
const (
	defaultTable  = "jobonce_keys"
	defaultPrefix = "jobonce:"
)

// callTimeout bounds each of a command's steps on the store (the watch of
// release comes on top).
const callTimeout = 10 * time.Second

// backend is the store a command line names: its kind and URL.
type backend struct {
	postgres bool
	url      string
}

// pickBackend returns the store c names: PostgreSQL at -postgres, or at
// $DATABASE_URL when neither -redis nor $REDIS_URL is set; otherwise Redis
// at -redis, $REDIS_URL or defaultRedisURL.
func pickBackend(c *invocation) (backend, error) {
	o := c.opt
	var b backend
	switch {
	case o.redisURL != "" && o.postgresURL != "":
		return b, errors.New("-redis and -postgres name two stores: give one")
	case o.postgresURL != "":
		b = backend{postgres: true, url: o.postgresURL}
	case o.redisURL == "" && os.Getenv("REDIS_URL") == "" && os.Getenv("DATABASE_URL") != "":
		b = backend{postgres: true, url: os.Getenv("DATABASE_URL")}
	default:
		b = backend{url: cmp.Or(o.redisURL, os.Getenv("REDIS_URL"), defaultRedisURL)}
	}
	if !b.postgres && (c.set["schema"] || c.set["table"]) {
		return b, errors.New("-schema and -table name a PostgreSQL table: give -postgres (or $DATABASE_URL without $REDIS_URL)")
	}
	return b, nil
}

// openStore connects to the store c names, and checks that a PostgreSQL
// table is migrated.
func openStore(ctx context.Context, c *invocation) (keyStore, error) {
	b, err := pickBackend(c)
	if err != nil {
		return nil, err
	}
	if b.postgres {
		ctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		return openPostgres(ctx, b.url, c.opt.schema, c.opt.table)
	}
	return openRedis(b.url)
}
