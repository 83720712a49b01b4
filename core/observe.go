package core

import (
	"context"
	"log/slog"
	"time"
)

// observe reports one outcome to the observer, the logger and the metrics.
func (g *Guard) observe(ctx context.Context, key string, out Outcome, err error, ran time.Duration) {
	g.metrics.record(ctx, out, ran)
	if g.cfg.Observer != nil {
		g.cfg.Observer(ctx, Event{Key: key, Outcome: out, Err: err, Duration: ran})
	}
	level := slog.LevelDebug
	msg := "jobonce: " + out.String()
	switch out {
	case LeaseLost:
		level, msg = slog.LevelWarn, "jobonce: job ran but its lease was lost before it was recorded; another copy may run it again"
	case Unrecorded:
		level, msg = slog.LevelWarn, "jobonce: job ran but the store could not record it; a later copy may run it again"
	case Unguarded:
		if err != nil {
			level, msg = slog.LevelWarn, "jobonce: store unavailable; job ran unguarded (FailOpen)"
		}
	case Conflict, Unavailable, Rejected:
		level = slog.LevelWarn
	}
	if !g.cfg.Logger.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{slog.String("key", key), slog.String("outcome", out.String())}
	if ran > 0 {
		attrs = append(attrs, slog.Duration("ran", ran))
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	g.cfg.Logger.LogAttrs(ctx, level, msg, attrs...)
}
