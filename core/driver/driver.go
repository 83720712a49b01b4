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
// write the store made but could not confirm as durable in time. Before a
// claim is answered so, the store releases it. A claim that finds a done
// marker not yet confirmed is answered so too. The Guard sends a Complete
// answered so again. core.ErrUnreplicated is the same value.
var ErrUnreplicated = errors.New("jobonce: write not acknowledged by enough replicas")

// ErrUnreachable is what a store wraps around a client's error that means
// the server could not be reached, when the error does not show it. A
// net.Error, io.EOF or a refused connection shows it already. Under
// core.Config.FailOpen, only such errors run a job unguarded.
var ErrUnreachable = errors.New("jobonce: driver: store unreachable")

// ErrStoreRisk is what a store's error wraps when the store can be reached
// but its settings can lose done markers, as ReadyStore.Ready's may.
// core.ErrStoreRisk is the same value.
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
	// StateClaimed: the key was absent, or its claim expired, and is now
	// claimed with the caller's token. For TxStore.RecordTx, it is recorded
	// in the caller's transaction.
	StateClaimed State = iota + 1
	// StateRunning: another token holds a live claim. For RecordTx, another
	// transaction holds the key uncommitted.
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

// ClaimReply is a store's answer to a ClaimRequest or a RecordRequest, read
// in the same atomic step.
type ClaimReply struct {
	// State is the key's state: claimed by this request, running, or done.
	State State
	// Fingerprint is the fingerprint stored with a running claim or done marker.
	Fingerprint string
	// Remaining is a running claim's remaining lease, or a done marker's
	// remaining retention. For RecordTx's StateRunning, it hints when the
	// holding transaction may have ended.
	Remaining time.Duration
	// Result is the result stored with a done marker, if any.
	Result []byte
	// Fence is the new claim's fencing token for StateClaimed. It is the
	// store's clock in microseconds since the Unix epoch, or one more than
	// the key's previous fence, if the store knows it, when that is larger. A claim sent again with
	// the token that holds the key gets the same fence. RecordTx reports its
	// record's fence alike. For StateRunning, it is the running claim's
	// fence, or zero when the store does not say. docs/stores.md explains.
	Fence int64
}

// CompleteRequest asks a store to turn the claim held by Token into a done
// marker.
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
	// Fence is the claim's ClaimReply.Fence, or zero. A store whose done
	// markers keep the fence, not the token, tells its own marker by it.
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

// Store keeps claims and done markers. Every method is one atomic
// operation, safe for concurrent use. A Store must also keep these rules,
// which core/storetest checks:
//   - When ctx ends, a method returns an error that wraps ctx.Err().
//   - Keys, fingerprints and results may hold any bytes. A store may refuse
//     a key too long for it, with an error saying so. A nil result comes
//     back nil, an empty one empty.
//   - A lease or retention under 1ms is an error naming the field.
//   - A claim sent again with the token that holds the key answers
//     StateClaimed, without renewing the lease.
//   - A complete sent again by the claim whose done marker holds the key
//     answers nil, without renewing the retention.
type Store interface {
	// Claim claims req.Key for req.Token if the key is absent or its claim
	// expired. Otherwise it reports the key's state.
	Claim(ctx context.Context, req ClaimRequest) (ClaimReply, error)
	// Extend renews the lease of the claim held by token. It returns
	// ErrLeaseLost when token no longer holds the key.
	Extend(ctx context.Context, key string, token Token, lease time.Duration) error
	// Complete replaces the claim held by req.Token with a done marker that
	// names the claim. Sent again by that claim, it finds its own marker and
	// answers nil, writing it again where the store waits for replicas. It
	// returns ErrLeaseLost when the token neither holds the key nor wrote
	// its marker.
	Complete(ctx context.Context, req CompleteRequest) error
	// Release deletes the claim held by token. It returns ErrLeaseLost when
	// the token no longer holds the key, and never touches another claim.
	Release(ctx context.Context, key string, token Token) error
}

// BatchStore is a Store that writes many done markers and claims in one
// round trip.
type BatchStore interface {
	Store
	// Batch runs every complete as Complete would, and every claim as Claim
	// would, in one round trip. It returns one reply and one error per
	// claim, and one error per complete, in order. A request the store could
	// not answer gets an error, never a zero reply. A claim of a key
	// completed in the same batch may find it done or running, never free.
	Batch(ctx context.Context, completes []CompleteRequest, claims []ClaimRequest) (replies []ClaimReply, claimErrs, completeErrs []error)
}

// Notifier is a Store with a completion signal: it tells a copy waiting
// for a running claim when that claim ends. Only a claim that Await marked
// is notified, once, by the Complete or Release that ends it. A lost
// notification costs the waiter latency, never correctness.
type Notifier interface {
	Store
	// Await is Claim, and marks the key awaited when it finds another live
	// claim, in the same atomic step. The mark lasts no longer than that
	// claim's lease. A reply of StateRunning carries the claim's Fence.
	Await(ctx context.Context, req ClaimRequest) (ClaimReply, error)
	// Listen opens a Listener that calls notify(key) for a key it listens
	// to: once listening has begun, whenever an awaited claim of the key
	// ended, and after each reconnection. notify("") asks to read every key
	// again. The Guard's notify returns quickly. It may be called from any
	// goroutine, within Add too, and more often than asked. docs/stores.md
	// explains the signal.
	Listen(ctx context.Context, notify func(key string)) (Listener, error)
}

// Listener receives a Notifier's notifications. Its methods are safe for
// concurrent use.
type Listener interface {
	// Add starts listening to key. Listening has begun once notify reports
	// the key, which may happen before Add returns.
	Add(ctx context.Context, key string) error
	// Remove stops listening to key. A notification of key may still come.
	Remove(ctx context.Context, key string) error
	// Close stops listening to every key, within a bound of the store's
	// own. When it returns nil, the Listener's goroutines have ended, and
	// notify is not called again. After an error, a goroutine may still be
	// making a connection; it ends by the client's timeouts, and never
	// calls notify.
	Close() error
}

// ReadyStore is a Store that can tell whether it can be used now, for
// core.Guard.Ready. A store without it is always ready.
type ReadyStore interface {
	Store
	// Ready returns nil when the store can be used now. It returns an error
	// wrapping ErrStoreRisk when its settings can lose done markers, else
	// the error that kept it from being used.
	Ready(ctx context.Context) error
}

// ResultLimiter is a Store whose done markers hold results of at most
// MaxResultSize bytes. core.New refuses a larger Config.MaxResultSize.
type ResultLimiter interface {
	Store
	MaxResultSize() int
}

// TxStore is a Store that records keys inside transactions of type TTx,
// such as pgx.Tx. The record and the job's writes commit together, or
// neither does. core.NewTxGuard uses it.
type TxStore[TTx any] interface {
	Store
	// RecordTx records req.Key as done in tx, and answers StateClaimed. A
	// key done, held by a live claim, or held by a transaction past the
	// store's bound is answered StateDone or StateRunning instead, and tx is
	// left as it was, usable. After an error, tx is left as it was when
	// possible.
	RecordTx(ctx context.Context, tx TTx, req RecordRequest) (ClaimReply, error)
	// BeginTx begins a transaction on the store's database.
	BeginTx(ctx context.Context) (TTx, error)
	// CommitTx commits tx, and returns nil only when tx committed. When the
	// commit's answer is lost, it finds out within ctx whether tx committed.
	CommitTx(ctx context.Context, tx TTx) error
	// RollbackTx rolls tx back. After a commit, it does nothing.
	RollbackTx(ctx context.Context, tx TTx) error
}
