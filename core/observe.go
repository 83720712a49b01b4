package core

import (
	"context"
	"log/slog"
)

// observe reports one outcome to the observer, the logger and the metrics.
func (g *Guard) observe(ctx context.Context, e Event) {
	g.metrics.record(ctx, &e)
	if g.cfg.Observer != nil {
		g.cfg.Observer(ctx, e)
	}
	level := slog.LevelDebug
	msg := "jobonce: " + e.Outcome.String()
	switch e.Outcome {
	case LeaseLost:
		level, msg = slog.LevelWarn, "jobonce: job ran but its lease was lost before it was recorded; another copy may run it again"
	case Unrecorded:
		level, msg = slog.LevelWarn, "jobonce: job ran but the store could not record it; a later copy may run it again"
	case Unguarded:
		switch {
		case e.WouldSkip != 0:
			msg = "jobonce: shadow mode ran a job that enforcement would skip as " + e.WouldSkip.String()
		case e.Err != nil:
			level, msg = slog.LevelWarn, "jobonce: store unavailable; job ran unguarded (FailOpen)"
		}
	case Conflict, Unavailable, Rejected:
		level = slog.LevelWarn
	}
	if !g.cfg.Logger.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 8)
	attrs = append(attrs, slog.String("key", e.Key), slog.String("outcome", e.Outcome.String()))
	if e.Source != "" || e.Kind != "" {
		attrs = append(attrs, slog.String("source", e.Source), slog.String("kind", e.Kind))
	}
	if g.cfg.Consumer != "" {
		attrs = append(attrs, slog.String("consumer", g.cfg.Consumer))
	}
	if e.WouldSkip != 0 {
		attrs = append(attrs, slog.String("would_skip", e.WouldSkip.String()))
	}
	if e.Duration > 0 {
		attrs = append(attrs, slog.Duration("ran", e.Duration))
	}
	if e.Lag > 0 {
		attrs = append(attrs, slog.Duration("lag", e.Lag))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("error", e.Err.Error()))
	}
	g.cfg.Logger.LogAttrs(ctx, level, msg, attrs...)
}

// event returns the Event of an outcome of job.
func (job *Job) event(out Outcome, err error) Event {
	return Event{Key: job.Key, Kind: job.Kind, Source: job.Source, Outcome: out, Err: err}
}
