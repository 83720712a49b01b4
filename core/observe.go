package core

import (
	"context"
	"log/slog"
)

// observe reports one outcome to the observer, the logger and the metrics.
// defaultKey is the job's Job.DefaultKey: the first Duplicate of each kind
// under an adapter's default key (in shadow mode, the first job enforcement
// would skip as one) is logged at Info, saying how to key work that repeats
// on purpose.
func (g *Guard) observe(ctx context.Context, e Event, defaultKey bool) {
	g.metrics.record(ctx, &e)
	if g.cfg.Observer != nil {
		g.cfg.Observer(ctx, e)
	}
	level, msg := logLevel(&e), ""
	shadowSkip := e.WouldSkip == Duplicate
	if defaultKey && (e.Outcome == Duplicate || shadowSkip) && g.skipped.first(e.Source, e.Kind) {
		level, msg = slog.LevelInfo, firstSkipMessage(e.Source, shadowSkip)
	}
	if !g.cfg.Logger.Enabled(ctx, level) {
		return
	}
	if msg == "" {
		msg = logMessage(&e)
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

// logLevel returns the level of e's log record: Warn for the outcomes an
// operator must see, Debug for the rest (observe raises a kind's first skip
// under a default key to Info).
func logLevel(e *Event) slog.Level {
	switch e.Outcome {
	case LeaseLost, Unrecorded, Conflict, Unavailable, Rejected:
		return slog.LevelWarn
	case Ran:
		if e.Err != nil { // the result was not stored
			return slog.LevelWarn
		}
	case Unguarded:
		if e.Err != nil && e.WouldSkip == 0 {
			return slog.LevelWarn
		}
	}
	return slog.LevelDebug
}

// logMessage returns the message of e's log record.
func logMessage(e *Event) string {
	switch {
	case e.Outcome == LeaseLost:
		return "jobonce: job ran but its lease was lost before it was recorded; another copy may run it again"
	case e.Outcome == Unrecorded:
		return "jobonce: job ran but the store could not record it; a later copy may run it again"
	case e.Outcome == Unguarded && e.WouldSkip != 0:
		return "jobonce: shadow mode ran a job that enforcement would skip as " + e.WouldSkip.String()
	case e.Outcome == Ran && e.Err != nil:
		return "jobonce: job ran and was recorded without its result, too large to store; duplicates get no result"
	case e.Outcome == Unguarded && e.Err != nil:
		return "jobonce: store unavailable; job ran unguarded (FailOpen)"
	}
	return "jobonce: " + e.Outcome.String()
}

// event returns the Event of an outcome of job.
func (job *Job) event(out Outcome, err error) Event {
	return Event{Key: job.Key, Kind: job.Kind, Source: job.Source, Outcome: out, Err: err}
}
