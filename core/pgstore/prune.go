package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// pruneFirstRows is the most rows Prune's first statement deletes; later
// statements grow towards Config.PruneBatch while they stay quick, and
// shrink to no fewer than pruneLeastRows when they are slow.
const pruneFirstRows, pruneLeastRows = 100, 10

// Prune deletes expired rows, lapsed claims and done rows past their
// retention, and returns how many it deleted. It never deletes a live
// claim, a live done row or an uncommitted row. It deletes in short
// statements, sized so that a claim waiting on one waits a fraction of
// Config.LockTimeout. When ctx ends, it stops early with an error matching
// ctx's. docs/postgresql.md explains the sizing.
func (s *Store) Prune(ctx context.Context) (int, error) {
	total := 0
	rows := min(pruneFirstRows, s.cfg.PruneBatch)
	quick, slow := s.cfg.LockTimeout/8, s.cfg.LockTimeout/4
	for {
		start := time.Now()
		tag, err := s.pool.Exec(ctx, s.sql.prune, rows)
		took := time.Since(start)
		if err != nil {
			return total, s.fail(ctx, err)
		}
		n := int(tag.RowsAffected())
		total += n
		if n < rows {
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
		switch {
		case took > slow:
			rows = max(rows/2, min(pruneLeastRows, s.cfg.PruneBatch))
		case took < quick:
			rows = min(rows*2, s.cfg.PruneBatch)
		}
	}
}

// RunPruner calls Prune every interval until ctx is done, then returns nil.
// It blocks, so run it on a goroutine of your own. Prune's errors are
// logged to Config.Logger and do not stop it. A non-positive interval
// returns an error at once.
func (s *Store) RunPruner(ctx context.Context, every time.Duration) error {
	if every <= 0 {
		return fmt.Errorf("jobonce: pgstore: RunPruner: interval must be positive, got %s", every)
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
