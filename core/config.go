package core

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// Config configures a Guard. The zero value, or a nil *Config, gives the
// defaults. New copies the Config; later changes to it have no effect.
type Config struct {
	// Lease is how long a claim lives without a heartbeat. A crashed worker's
	// claim expires after Lease, so a later copy can run. Defaults to 30s.
	Lease time.Duration

	// Retention is how long a done marker is kept: duplicates that arrive
	// within it are skipped. It must be at least Lease. Defaults to 24h.
	Retention time.Duration

	// DisableHeartbeat turns off lease extension while a job runs. A job that
	// runs longer than Lease then loses its claim. Defaults to false
	// (heartbeat on, every Lease/3).
	DisableHeartbeat bool

	// DisableGroupCommit turns off group commit. With a BatchStore
	// (redisstore, pgstore), claims and done markers of concurrent calls
	// share store round trips: up to four round trips are in flight, a call
	// that finds one of them free goes at once, alone, and calls that find
	// all four in flight go together in the next to end, up to 128, claims
	// and markers alike. One round trip that hangs holds nobody up while
	// another is free. No goroutine is involved. Defaults to false (group
	// commit on).
	DisableGroupCommit bool

	// FailOpen runs jobs unguarded (outcome Unguarded), and lets Enqueue
	// publish without a marker, when the store cannot be reached: a dial
	// refused, a connection reset or closed (EOF), a network timeout,
	// StoreTimeout expiring on a hung store while the caller's context is
	// live, or an error a store wraps around driver.ErrUnreachable. Any
	// other failure fails closed even so (Unavailable, an error matching
	// ErrStoreUnavailable that wraps the cause): an error the server
	// answered (a Redis OOM or READONLY, a PostgreSQL error), a write not
	// acknowledged (ErrUnreplicated), a store that panicked. The caller's
	// own cancellation or deadline (a timeout once its deadline has passed
	// included) is Canceled, never Unguarded. Defaults to false: fail
	// closed on every failure.
	FailOpen bool

	// KeyPrefix is prepended to every key in the store. Defaults to "jobonce:".
	KeyPrefix string

	// PlainKeys stores keys as given (prefixed; hashed only beyond MaxKeyLen
	// bytes, or when they start with "#" or "enq#", names kept for hashed
	// keys and Enqueue markers), readable in redis-cli but larger. Defaults to
	// false: keys are stored hashed to a fixed 20 characters after the
	// prefix (128 bits of SHA-256 in Ascii85, never a Redis Cluster hash
	// tag), which keeps a Redis done marker under 150 bytes.
	PlainKeys bool

	// MinRetryAfter is the smallest RetryAfter hint given to a copy that finds
	// its job running. Defaults to 100ms.
	MinRetryAfter time.Duration

	// MaxRetryAfter is the largest RetryAfter hint. The hint is the running
	// claim's remaining lease, which the heartbeat keeps near Lease, so this
	// bound decides how soon a copy that found its job running comes back.
	// Defaults to Lease/3, the heartbeat's period, or MinRetryAfter when
	// that is larger.
	MaxRetryAfter time.Duration

	// WaitingShare bounds the copies that wait for a running copy of their
	// job (Job.WaitUntil) at once, as a share of the Guard's calls in
	// progress: 0.25 lets a quarter of a worker pool wait, whatever its
	// size, and never fewer than one. One copy of a key waits at a time.
	// A copy that may not wait reports Running at once, with a RetryAfter
	// hint of when its running copy is expected to end. Defaults to 0.25.
	WaitingShare float64

	// StoreTimeout bounds every store call: each claim (also under a context
	// without a deadline), Release and Extend, and a done marker's write with
	// all its retries. Complete, Release and Extend run even after the
	// caller's context is cancelled. Defaults to 5s.
	StoreTimeout time.Duration

	// MaxResultSize is the largest result (what a RunFunc returns) stored
	// with a done marker, in bytes; every duplicate's claim reads the stored
	// result whole. A larger result is not stored: the job has run, so its
	// done marker is written without it and the delivery is acknowledged as
	// usual (Ran, a nil error, Result.Value the whole result), the event's
	// Err matches ErrResultTooLarge and names the size and the limit, it is
	// logged at Warn, and the job's duplicates get a nil Result.Value. Set it
	// larger for larger results (redisstore and pgstore hold up to hundreds
	// of megabytes, at that cost per duplicate; dynamostore up to
	// dynamostore.MaxResultSize, and New refuses more), or keep a large
	// result elsewhere and return its address. Defaults to 64 KiB (65536),
	// or less when the store's done markers hold less
	// (driver.ResultLimiter).
	MaxResultSize int

	// Shadow turns on shadow mode, for rolling jobonce out: the Guard claims
	// and records as usual, but runs every delivery, also those it would
	// skip (a duplicate, a copy that finds its job running, a conflict, an
	// empty key, a store failure), without a claim. Those are reported as
	// Unguarded with Event.WouldSkip set to the outcome enforcement would
	// have given, and counted in jobonce.shadow.skips, so a team can watch
	// what enforcement would change, then turn Shadow off. Defaults to false.
	Shadow bool

	// Consumer names this Guard's consumer in metrics and logs (the
	// jobonce.consumer attribute), such as "billing-worker", so that the
	// outcomes of one consumer stand out. Keep it to a fixed set of names.
	// Defaults to "" (no attribute).
	Consumer string

	// Observer, when set, is called once for every outcome.
	// Defaults to nil (no observer).
	Observer Observer

	// Logger receives one record per outcome: Debug for the ordinary ones, Warn
	// for Conflict, LeaseLost, Unrecorded, Unavailable and Rejected, for
	// Unguarded when FailOpen ran a job on a store failure, and for Ran when
	// the result was too large to store (MaxResultSize), and Info for
	// the first Duplicate of each source and kind (Job.Source, Job.Kind; the
	// first 100 pairs) under an adapter's default key (Job.DefaultKey), or
	// in shadow mode the first job enforcement would skip as one, which
	// names the setting that keys work repeated on purpose by occurrence.
	// Defaults to slog.Default().
	Logger *slog.Logger

	// MeterProvider supplies the OpenTelemetry meter of the Guard's metrics
	// (docs/semantics.md lists them); the Guard records its Lease and
	// Retention on it when it is made. Defaults to the global provider
	// (otel.GetMeterProvider).
	MeterProvider metric.MeterProvider
}

// DefaultMaxResultSize is Config.MaxResultSize's default: 64 KiB.
const DefaultMaxResultSize = 64 << 10

// Observer is called once for every outcome of Guard.Do (and of the Claim API).
// It runs on the job's goroutine and must not block.
type Observer func(ctx context.Context, e Event)

// Event describes one outcome.
type Event struct {
	// Key is the user's key, as passed to Do.
	Key string
	// Kind and Source are the job's (see Job): where the delivery came from.
	Kind, Source string
	// Outcome is what happened.
	Outcome Outcome
	// Err is the error returned to the caller, or for LeaseLost and Unrecorded
	// the store error that kept the done marker from being written, or for
	// Ran an error matching ErrResultTooLarge when the result was not stored
	// (see Config.MaxResultSize).
	Err error
	// Duration is how long the job's function ran; zero when it did not run.
	Duration time.Duration
	// Lag is, for a Duplicate, how long after its first copy's done marker
	// was written this copy arrived (Retention minus the marker's remaining
	// retention); zero when the store did not say, and when the copy came
	// within the store's resolution (Redis keeps a millisecond). The
	// longest lags seen tell how long Retention must be: a copy arriving
	// after Retention is not a duplicate any more, it runs again.
	Lag time.Duration
	// WouldSkip is, in shadow mode (Config.Shadow), the outcome with which
	// enforcement would have skipped this delivery, which ran instead; zero
	// otherwise.
	WouldSkip Outcome
	// Waited is how long this delivery waited for a running copy of its job
	// (Job.WaitUntil) before its outcome; zero when it did not wait.
	Waited time.Duration
}

func (c *Config) withDefaults() (Config, error) {
	var cfg Config
	if c != nil {
		cfg = *c
	}
	if err := notNegative("Lease", cfg.Lease); err != nil {
		return cfg, err
	}
	if cfg.Lease == 0 {
		cfg.Lease = 30 * time.Second
	}
	if cfg.Lease < 3*time.Millisecond {
		return cfg, fmt.Errorf("jobonce: core: Config.Lease must be at least 3ms, got %s", cfg.Lease)
	}
	if err := notNegative("Retention", cfg.Retention); err != nil {
		return cfg, err
	}
	if cfg.Retention == 0 {
		cfg.Retention = 24 * time.Hour
	}
	if cfg.Retention < cfg.Lease {
		return cfg, fmt.Errorf("jobonce: core: Config.Retention must be at least Config.Lease (%s), got %s", cfg.Lease, cfg.Retention)
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = "jobonce:"
	}
	if err := notNegative("MinRetryAfter", cfg.MinRetryAfter); err != nil {
		return cfg, err
	}
	if err := notNegative("MaxRetryAfter", cfg.MaxRetryAfter); err != nil {
		return cfg, err
	}
	if err := notNegative("StoreTimeout", cfg.StoreTimeout); err != nil {
		return cfg, err
	}
	if cfg.MinRetryAfter == 0 {
		cfg.MinRetryAfter = 100 * time.Millisecond
	}
	if cfg.MaxRetryAfter == 0 {
		cfg.MaxRetryAfter = max(cfg.Lease/3, cfg.MinRetryAfter)
	}
	if cfg.MaxRetryAfter < cfg.MinRetryAfter {
		return cfg, fmt.Errorf("jobonce: core: Config.MaxRetryAfter must be at least Config.MinRetryAfter (%s), got %s", cfg.MinRetryAfter, cfg.MaxRetryAfter)
	}
	if cfg.StoreTimeout == 0 {
		cfg.StoreTimeout = 5 * time.Second
	}
	if cfg.WaitingShare < 0 || cfg.WaitingShare > 1 {
		return cfg, fmt.Errorf("jobonce: core: Config.WaitingShare must be between 0 and 1, got %g", cfg.WaitingShare)
	}
	if cfg.WaitingShare == 0 {
		cfg.WaitingShare = 0.25
	}
	if cfg.MaxResultSize < 0 {
		return cfg, fmt.Errorf("jobonce: core: Config.MaxResultSize must not be negative, got %d", cfg.MaxResultSize)
	}
	if cfg.MaxResultSize == 0 {
		cfg.MaxResultSize = DefaultMaxResultSize
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg, nil
}

// notNegative returns an error naming Config.field when d is negative.
func notNegative(field string, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("jobonce: core: Config.%s must not be negative, got %s", field, d)
	}
	return nil
}
