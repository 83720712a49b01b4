package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Prune deletes expired rows (lapsed claims and done rows past their
// retention), Config.PruneBatch rows per statement, until none is left, and
// returns how many it deleted. It never deletes a live claim, a live done row,
// or a row of a transaction not yet committed. It stops early with ctx's error.
func (s *Store) Prune(ctx context.Context) (int, error) {
	total := 0
	for {
		tag, err := s.pool.Exec(ctx, s.sql.prune, s.cfg.PruneBatch)
		if err != nil {
			return total, s.fail(ctx, err)
		}
		n := int(tag.RowsAffected())
		total += n
		if n < s.cfg.PruneBatch {
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}

// RunPruner calls Prune every interval until ctx is done, then returns nil.
// It blocks: run it on a goroutine of your own, which ends with ctx. Prune
// errors are logged to Config.Logger and do not stop it.
func (s *Store) RunPruner(ctx context.Context, every time.Duration) error {
	if every <= 0 {
		return fmt.Errorf("jobonce: pgstore.RunPruner: interval must be positive, got %s", every)
	}
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		n, err := s.Prune(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled):
			s.cfg.Logger.WarnContext(ctx, "jobonce: pgstore prune failed", "table", s.table, "deleted", n, "error", err)
		case n > 0:
			s.cfg.Logger.DebugContext(ctx, "jobonce: pgstore pruned expired rows", "table", s.table, "deleted", n)
		}
	}
}
