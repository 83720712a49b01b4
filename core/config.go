package core

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// Config configures a Guard. A nil *Config, or a zero field, gives the
// default. New copies the Config; later changes to it have no effect.
// docs/stores.md lists the fields, and docs/semantics.md explains them.
type Config struct {
	// Lease is how long a claim lives without a heartbeat: a crashed
	// worker's jobs run again after it. Defaults to 30s.
	Lease time.Duration

	// Retention is how long a done marker is kept, at least Lease. Defaults
	// to 24h.
	Retention time.Duration

	// DisableHeartbeat turns off the heartbeat, which renews a running job's
	// lease every Lease/3. Defaults to false.
	DisableHeartbeat bool

	// DisableGroupCommit turns off the group commit. Defaults to false.
	DisableGroupCommit bool

	// FailOpen runs jobs unguarded, one copy of a key at a time, when the
	// store cannot be reached, so a copy may run twice. Defaults to false.
	FailOpen bool

	// KeyPrefix is prepended to every stored key. Defaults to "jobonce:".
	KeyPrefix string

	// PlainKeys stores most keys as given, readable in redis-cli. Defaults
	// to false: every key is stored hashed.
	PlainKeys bool

	// MinRetryAfter is the smallest RetryAfter hint. Defaults to 100ms.
	MinRetryAfter time.Duration

	// MaxRetryAfter is the largest RetryAfter hint. Defaults to Lease/3, or
	// MinRetryAfter when that is larger.
	MaxRetryAfter time.Duration

	// WaitingShare bounds the copies waiting for a running copy, as a share
	// of the calls in progress. Defaults to 0.25.
	WaitingShare float64

	// StoreTimeout bounds every store call, and a done marker's write with
	// its retries. Defaults to 5s.
	StoreTimeout time.Duration

	// MaxResultSize is the largest result, in bytes, stored with a done
	// marker. A larger one is not stored, and the job is still Ran. Defaults
	// to DefaultMaxResultSize, or the store's lower limit (driver.ResultLimiter).
	MaxResultSize int

	// Shadow turns on shadow mode, which runs every delivery and counts what
	// the Guard would skip. docs/semantics.md ("Shadow mode for rollout") says
	// what to check before turning it off. Defaults to false.
	Shadow bool

	// Consumer names this Guard in metrics and logs. Defaults to "".
	Consumer string

	// Observer is called once for every outcome. Defaults to nil.
	Observer Observer

	// Logger receives one record per outcome. Defaults to slog.Default().
	Logger *slog.Logger

	// MeterProvider supplies the Guard's meter. Defaults to the global one.
	MeterProvider metric.MeterProvider
}

// DefaultMaxResultSize is Config.MaxResultSize's default: 64 KiB.
const DefaultMaxResultSize = 64 << 10

// Observer is called once for every outcome. It runs on the job's goroutine
// and must not block.
type Observer func(ctx context.Context, e Event)

// Event describes one outcome.
type Event struct {
	// Key is the user's key.
	Key string
	// Kind and Source are the job's.
	Kind, Source string
	// Outcome is what happened.
	Outcome Outcome
	// Err is the error returned to the caller; for LeaseLost and Unrecorded,
	// the store's; for Ran, ErrResultTooLarge when the result was not stored.
	Err error
	// Duration is how long the job's function ran.
	Duration time.Duration
	// Lag is how long after the done marker a Duplicate arrived, if known.
	Lag time.Duration
	// WouldSkip is, in shadow mode, the outcome enforcement would have given.
	WouldSkip Outcome
	// Waited is how long the delivery waited for a running copy.
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
