package driver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"
)

// ErrLeaseLost is what Extend, Complete and Release return when the token
// no longer holds the key. core.ErrLeaseLost is the same value.
var ErrLeaseLost = errors.New("jobonce: lease lost")

// ErrUnreplicated is what Claim, Complete, Extend and Batch return for a
// write the store made but whose durability it could not confirm in time
// (too few replicas, or no fsync, acknowledged it): a failover or restart
// may lose it. A claim answered so has been released, and a claim that
// found a done marker not yet acknowledged is answered so too (the copy is
// tried again later); a done marker answered so is written on the primary,
// and the Guard sends the same request again until acknowledged or its time
// is up. core.ErrUnreplicated is the same value.
var ErrUnreplicated = errors.New("jobonce: write not acknowledged by enough replicas")

// ErrUnreachable is what a store may wrap around an error of its client
// that says the server could not be reached, when the error itself does not
// show it (a net.Error, io.EOF, a refused or reset connection, a timeout
// do): go-redis's pool timeout, say. The Guard runs a job unguarded under
// core.Config.FailOpen only for such errors.
var ErrUnreachable = errors.New("jobonce: driver: store unreachable")

// ErrStoreRisk is what a store wraps around an error saying that it can be
// reached but that its settings can lose done markers, so that duplicates
// can run: a Redis that may evict keys or keeps no writes across a restart
// (redisstore.Config.Strict). core.ErrStoreRisk is the same value.
var ErrStoreRisk = errors.New("jobonce: store settings can lose done markers")

// Token identifies one claim. Only the holder of the token may extend,
// complete or release the claim.
type Token [16]byte

// NewToken returns a random 128-bit token.
func NewToken() Token {
	var t Token
	_, _ = rand.Read(t[:]) // crypto/rand.Read never fails (Go 1.24+)
	return t
}

// String returns the token in hex.
func (t Token) String() string { return hex.EncodeToString(t[:]) }

// State is the state of a key as a store reports it.
type State uint8

const (
	// StateClaimed: the key was absent (or its claim had expired) and is now
	// claimed with the caller's token (or, for TxStore.RecordTx, recorded as
	// done in the caller's transaction).
	StateClaimed State = iota + 1
	// StateRunning: another token holds a live claim (or, for RecordTx,
	// another transaction holds the key and has not committed).
	StateRunning
	// StateDone: the key was completed and is within its retention.
	StateDone
)

// String returns the state's name.
func (s State) String() string {
	switch s {
	case StateClaimed:
		return "claimed"
	case StateRunning:
		return "running"
	case StateDone:
		return "done"
	}
	return "unknown"
}

// ClaimRequest asks a store to claim Key for Token.
type ClaimRequest struct {
	// Key is the stored key: already prefixed and bounded by the Guard.
	Key string
	// Token is the new claim's token.
	Token Token
	// Fingerprint identifies the payload; it may be empty.
	Fingerprint string
	// Lease is how long the claim lives unless extended.
	Lease time.Duration
}

// ClaimReply is a store's answer to a ClaimRequest (or a RecordRequest),
// read in the same atomic step as the claim.
type ClaimReply struct {
	// State is the key's state: claimed by this request, running, or done.
	State State
	// Fingerprint is the fingerprint stored with a running claim or done marker.
	Fingerprint string
	// Remaining is a running claim's remaining lease, a done marker's
	// remaining retention, or for RecordTx the store's hint of when the
	// holding transaction may have ended.
	Remaining time.Duration
	// Result is the result stored with a done marker, if any.
	Result []byte
	// Fence is the claim's fencing token when State is StateClaimed: the
	// larger of the store's clock in microseconds since the Unix epoch and
	// one more than the fence of the key's previous claim, when the store
	// still knows it. Successive claims of a key therefore get increasing
	// fences, a takeover after a lapsed lease included, as long as the
	// store's clock does not step back by more than the time between them.
	// A claim sent again with the token that holds the key gets the same
	// fence. RecordTx reports the record's fence the same way. When State
	// is StateRunning, Fence is the running claim's fence, its start by the
	// store's clock, or zero when the store does not say.
	Fence int64
}

// CompleteRequest asks a store to turn the claim held by Token into a done marker.
type CompleteRequest struct {
	// Key is the stored key.
	Key string
	// Token must be the claim's token.
	Token Token
	// Fingerprint is kept with the done marker; it may be empty.
	Fingerprint string
	// Result is kept with the done marker; it may be nil.
	Result []byte
	// Retention is how long the done marker is kept.
	Retention time.Duration
	// Fence is the claim's fence (ClaimReply.Fence), or zero when the store
	// gave none. A store whose done markers keep the claim's fence rather
	// than its token (pgstore) tells its own marker from another claim's by
	// it; one that keeps the token ignores it.
	Fence int64
}

// RecordRequest asks a TxStore to record Key as done inside a transaction.
type RecordRequest struct {
	// Key is the stored key.
	Key string
	// Fingerprint is kept with the record; it may be empty.
	Fingerprint string
	// Retention is how long the record is kept once committed.
	Retention time.Duration
}

// Store keeps claims and done markers. Every method is one atomic operation.
// Implementations must be safe for concurrent use; core/storetest holds the
// conformance suite every Store must pass. In particular:
//   - A method honours its context: when ctx ends, it returns an error that
//     wraps ctx.Err(). The Guard bounds every call with its StoreTimeout
//     and tells the caller's own cancellation from a store outage by its own
//     context, not by the error.
//   - Keys, fingerprints and results of any length and bytes work; a nil
//     result comes back nil, an empty one empty.
//   - Leases and retentions under 1ms are rejected with an error naming the
//     field.
//   - A claim sent again with the token that already holds the key (a retried
//     round trip) answers StateClaimed without renewing the lease; a
//     complete sent again with the token whose done marker holds the key
//     answers nil without renewing the retention.
type Store interface {
	// Claim claims req.Key for req.Token if the key is absent or its claim
	// expired, and otherwise reports the key's current state.
	Claim(ctx context.Context, req ClaimRequest) (ClaimReply, error)
	// Extend renews the lease of the claim held by token. It returns
	// ErrLeaseLost when token no longer holds the key.
	Extend(ctx context.Context, key string, token Token, lease time.Duration) error
	// Complete replaces the claim held by req.Token with a done marker. A
	// done marker names the claim that wrote it, so a request sent again by
	// that claim (after its reply was lost, or answered ErrUnreplicated)
	// finds its own marker and answers nil, and writes it again where
	// acknowledgements are waited for; it returns ErrLeaseLost when the
	// token neither holds the key nor wrote its done marker, so it never
	// takes another claim's marker for its own.
	Complete(ctx context.Context, req CompleteRequest) error
	// Release deletes the claim held by token. It returns ErrLeaseLost when the
	// token no longer holds the key, and never touches another token's claim.
	Release(ctx context.Context, key string, token Token) error
}

// BatchStore is a Store that writes done markers and claims keys, many of
// each in one round trip. The Guard's group commit sends the markers of
// finished jobs with the claims of new ones; Guard.Claim and Guard.Finish
// send one kind.
type BatchStore interface {
	Store
	// Batch completes every request of completes as Complete would, and
	// claims every request of claims as Claim would, in one round trip. A
	// claim of a key completed in the same batch may find it done or still
	// running (and is then retried later), never free. It returns one reply
	// and one error per claim, and one error per complete, in order. A
	// request the store could not answer gets an error, never a zero reply.
	Batch(ctx context.Context, completes []CompleteRequest, claims []ClaimRequest) (replies []ClaimReply, claimErrs, completeErrs []error)
}

// Notifier is a Store that tells a copy waiting for a running claim the
// moment that claim ends, so that the copy need not poll: core.Guard waits
// on it for deliveries whose core.Job.WaitUntil is set. It costs nothing
// while nobody waits: only a claim that Await found running, and marked
// awaited, is notified, once, by the Complete or Release that ends it.
// A notification may be lost (a broken connection, a worker of an earlier
// release, a mark that lapsed): a waiter reads the key's state again by its
// own deadline, so a lost notification costs latency, never correctness.
type Notifier interface {
	Store
	// Await is Claim, and when it finds another token's live claim, it
	// marks the key awaited in the same atomic step, for no longer than
	// that claim's remaining lease: the Complete or Release that ends the
	// claim then notifies the key's listeners. A reply of StateRunning
	// carries the running claim's Fence.
	Await(ctx context.Context, req ClaimRequest) (ClaimReply, error)
	// Listen opens a Listener that calls notify with a key it listens to:
	// once listening to the key has begun (Listener.Add), and again
	// whenever it resumed after a broken connection, so that the caller
	// reads the key's state after each, and whenever an awaited claim of
	// the key ended. notify("") asks for the state of every key to be read
	// again: the Listener cannot tell which it may have missed. notify must
	// return quickly; it may be called from any goroutine, within Add too,
	// and more often than asked (a notification is a hint to read the key
	// again, never an answer).
	Listen(ctx context.Context, notify func(key string)) (Listener, error)
}

// Listener receives a Notifier's notifications (see Notifier.Listen). Its
// methods are safe for concurrent use.
type Listener interface {
	// Add starts listening to key. Listening has begun once notify reports
	// the key, which may happen before Add returns.
	Add(ctx context.Context, key string) error
	// Remove stops listening to key; a notification of key may still come
	// meanwhile.
	Remove(ctx context.Context, key string) error
	// Close stops listening to every key, within a bound of the store's
	// own (a second for redisstore). When it returns nil, every goroutine
	// of the Listener has ended and notify is not called again; an error
	// may leave a goroutine making a connection, which ends by the
	// client's own timeouts without calling notify.
	Close() error
}

// ReadyStore is a Store that can tell whether it can be used now, for a
// health or readiness check (core.Guard.Ready). The Guard takes a store
// that does not implement it as always ready.
type ReadyStore interface {
	Store
	// Ready returns nil when the store can be reached and used now; an error
	// wrapping ErrStoreRisk when it can be reached but its settings can lose
	// done markers; otherwise the error that kept it from being reached or
	// used. It honours ctx as every method does.
	Ready(ctx context.Context) error
}

// ResultLimiter is a Store whose done markers hold results of at most
// MaxResultSize bytes (dynamostore: a DynamoDB item's 400 KB). core.New
// refuses a Config.MaxResultSize larger than that.
type ResultLimiter interface {
	Store
	MaxResultSize() int
}

// TxStore is a Store that records keys inside transactions of type TTx
// (pgx.Tx for pgstore): the record and the job's effects commit together,
// or neither does. core.NewTxGuard turns it into the transactional mode.
type TxStore[TTx any] interface {
	Store
	// RecordTx records req.Key as done in tx, unless the key is done, held
	// by a live claim, or held by another transaction that does not commit
	// within the store's bound; it then reports that state (StateDone or
	// StateRunning) and leaves tx as it was and usable. StateClaimed means
	// recorded: the commit of tx makes it durable. An error means the record
	// could not be written; tx is then left as it was when possible.
	RecordTx(ctx context.Context, tx TTx, req RecordRequest) (ClaimReply, error)
	// BeginTx begins a transaction on the store's database.
	BeginTx(ctx context.Context) (TTx, error)
	// CommitTx commits tx. It returns nil only when tx committed: when the
	// commit's answer is lost, it finds out whether tx committed after all
	// (within ctx) and returns nil if so, else an error.
	CommitTx(ctx context.Context, tx TTx) error
	// RollbackTx rolls tx back; after a commit it does nothing.
	RollbackTx(ctx context.Context, tx TTx) error
}
