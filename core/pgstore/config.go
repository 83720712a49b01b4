package pgstore

import (
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// Config configures a Store. The zero value, or a nil *Config, gives the
// defaults. New copies the Config, so later changes to it have no effect.
type Config struct {
	// Schema holds the table. Set it when the pool's connections may have a
	// search_path that does not lead to the table. Defaults to ""
	// (unqualified: each connection's search_path decides).
	Schema string

	// Table is the name of the keys table. Defaults to "jobonce_keys".
	Table string

	// Migrate makes New run Migrate first. Defaults to false: New only
	// checks the table and its columns, and returns an error matching
	// ErrNotMigrated when one is missing.
	Migrate bool

	// MigrateLockTimeout bounds each lock wait of a migration that would
	// hold back claims. When it runs out, the migration changes nothing and
	// returns an error matching ErrMigrationBlocked. Claims queue behind a
	// change that waits, so keep it well under the Guard's StoreTimeout. It
	// must be between 1ms and 596h31m23.647s, PostgreSQL's lock_timeout
	// range. Defaults to 2s.
	MigrateLockTimeout time.Duration

	// LockTimeout bounds how long a claim or a transactional record waits
	// for a key that an uncommitted transaction holds. Then the key is
	// reported running (core.ErrRunning), so no worker hangs behind a long
	// transaction. A call whose context ends sooner waits less. It must be
	// between 1ms and 596h31m23.647s, PostgreSQL's lock_timeout range.
	// Defaults to 100ms.
	LockTimeout time.Duration

	// RetryAfter is the retry hint given for a key that an uncommitted
	// transaction holds. Defaults to 1s.
	RetryAfter time.Duration

	// PruneBatch is the most expired rows one statement of Prune deletes.
	// Defaults to 1000.
	PruneBatch int

	// Logger receives the errors of RunPruner. Defaults to slog.Default().
	Logger *slog.Logger
}

// maxLockTimeout is the largest lock_timeout PostgreSQL accepts: INT_MAX
// milliseconds (596h31m23.647s, almost 25 days).
const maxLockTimeout = math.MaxInt32 * time.Millisecond

// ceilMillis returns d in whole milliseconds, rounded up.
func ceilMillis(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		ms++
	}
	return ms
}

// maxIdentifier is PostgreSQL's longest identifier (NAMEDATALEN - 1).
const maxIdentifier = 63

// indexSuffix names the expiry index after the table.
const indexSuffix = "_expires_at_idx"

func (c *Config) withDefaults() (Config, error) {
	var cfg Config
	if c != nil {
		cfg = *c
	}
	if cfg.Table == "" {
		cfg.Table = "jobonce_keys"
	}
	if err := checkIdentifier("Table", cfg.Table, maxIdentifier-len(indexSuffix)); err != nil {
		return cfg, err
	}
	if cfg.Schema != "" {
		if err := checkIdentifier("Schema", cfg.Schema, maxIdentifier); err != nil {
			return cfg, err
		}
	}
	if cfg.LockTimeout < 0 {
		return cfg, fmt.Errorf("jobonce: pgstore: Config.LockTimeout must not be negative, got %s", cfg.LockTimeout)
	}
	if cfg.LockTimeout == 0 {
		cfg.LockTimeout = 100 * time.Millisecond
	}
	if cfg.LockTimeout < time.Millisecond || cfg.LockTimeout > maxLockTimeout {
		// lock_timeout is a whole number of milliseconds in an int, and 0
		// would mean "wait forever".
		return cfg, fmt.Errorf("jobonce: pgstore: Config.LockTimeout must be between 1ms and %s (PostgreSQL's lock_timeout range), got %s", maxLockTimeout, cfg.LockTimeout)
	}
	if cfg.MigrateLockTimeout < 0 {
		return cfg, fmt.Errorf("jobonce: pgstore: Config.MigrateLockTimeout must not be negative, got %s", cfg.MigrateLockTimeout)
	}
	if cfg.MigrateLockTimeout == 0 {
		cfg.MigrateLockTimeout = 2 * time.Second
	}
	if cfg.MigrateLockTimeout < time.Millisecond || cfg.MigrateLockTimeout > maxLockTimeout {
		return cfg, fmt.Errorf("jobonce: pgstore: Config.MigrateLockTimeout must be between 1ms and %s (PostgreSQL's lock_timeout range), got %s", maxLockTimeout, cfg.MigrateLockTimeout)
	}
	if cfg.RetryAfter < 0 {
		return cfg, fmt.Errorf("jobonce: pgstore: Config.RetryAfter must not be negative, got %s", cfg.RetryAfter)
	}
	if cfg.RetryAfter == 0 {
		cfg.RetryAfter = time.Second
	}
	if cfg.PruneBatch < 0 {
		return cfg, fmt.Errorf("jobonce: pgstore: Config.PruneBatch must not be negative, got %d", cfg.PruneBatch)
	}
	if cfg.PruneBatch == 0 {
		cfg.PruneBatch = 1000
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg, nil
}

func checkIdentifier(field, name string, maxLen int) error {
	if len(name) > maxLen {
		return fmt.Errorf("jobonce: pgstore: Config.%s %q is longer than %d bytes", field, name, maxLen)
	}
	if !utf8.ValidString(name) || strings.IndexByte(name, 0) >= 0 {
		return fmt.Errorf("jobonce: pgstore: Config.%s %q must be valid UTF-8 without NUL bytes", field, name)
	}
	return nil
}
