package dynamostore

import (
	"fmt"
	"time"
)

// Config configures a Store. The zero value, or a nil *Config, gives the
// defaults. New copies the Config, so later changes to it have no effect.
type Config struct {
	// Table is the name of the keys table. Defaults to "jobonce_keys".
	Table string

	// CreateTable makes New create a missing table, with on-demand
	// capacity and time to live on the "ttl" attribute, and wait until it
	// is active. Defaults to false: New only checks the table, and returns
	// an error matching ErrTableMissing or ErrKeySchema.
	CreateTable bool

	// ClockSkew is the most that the clocks of the processes sharing the
	// table may differ by. A claim takes over an ended lease or done marker
	// only ClockSkew after its end by the claimant's clock. It must not be
	// negative. Defaults to 1s.
	ClockSkew time.Duration

	// BatchConcurrency bounds the writes of one Batch (the Guard's group
	// commit) in flight at once. Defaults to 32.
	BatchConcurrency int

	// FenceKeep is how long a key's item outlives its last lease or
	// retention before DynamoDB's time to live may delete it. Within it, a
	// key's fences increase whatever the writers' clocks. Defaults to 24h.
	FenceKeep time.Duration
}

func (c *Config) withDefaults() (Config, error) {
	var cfg Config
	if c != nil {
		cfg = *c
	}
	if cfg.Table == "" {
		cfg.Table = "jobonce_keys"
	}
	if n := len(cfg.Table); n < 3 || n > 255 {
		return cfg, fmt.Errorf("jobonce: dynamostore: Config.Table %q must be 3 to 255 characters long", cfg.Table)
	}
	for _, r := range cfg.Table {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return cfg, fmt.Errorf("jobonce: dynamostore: Config.Table %q may hold only letters, digits, '_', '-' and '.'", cfg.Table)
		}
	}
	if cfg.ClockSkew < 0 {
		return cfg, fmt.Errorf("jobonce: dynamostore: Config.ClockSkew must not be negative, got %s", cfg.ClockSkew)
	}
	if cfg.ClockSkew == 0 {
		cfg.ClockSkew = time.Second
	}
	if cfg.BatchConcurrency < 0 {
		return cfg, fmt.Errorf("jobonce: dynamostore: Config.BatchConcurrency must not be negative, got %d", cfg.BatchConcurrency)
	}
	if cfg.BatchConcurrency == 0 {
		cfg.BatchConcurrency = 32
	}
	if cfg.FenceKeep < 0 {
		return cfg, fmt.Errorf("jobonce: dynamostore: Config.FenceKeep must not be negative, got %s", cfg.FenceKeep)
	}
	if cfg.FenceKeep == 0 {
		cfg.FenceKeep = 24 * time.Hour
	}
	return cfg, nil
}
