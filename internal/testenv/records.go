package testenv

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// Record is one log record kept by Records: its level, message and
// attributes (values as strings).
type Record struct {
	Level   slog.Level
	Message string
	Attrs   map[string]string
}

// Records is a slog.Handler that keeps every record, at every level, for
// tests that assert what was logged and at which level. The zero value is
// ready; it is safe for concurrent use.
type Records struct {
	mu   sync.Mutex
	recs []Record
}

// Logger returns a logger that writes to r.
func (r *Records) Logger() *slog.Logger { return slog.New(r) }

// All returns the records kept so far.
func (r *Records) All() []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Record(nil), r.recs...)
}

// Where returns the records kept so far whose attribute name has value.
func (r *Records) Where(name, value string) []Record {
	var out []Record
	for _, rec := range r.All() {
		if rec.Attrs[name] == value {
			out = append(out, rec)
		}
	}
	return out
}

// Enabled implements slog.Handler.
func (r *Records) Enabled(context.Context, slog.Level) bool { return true }

// Handle implements slog.Handler.
func (r *Records) Handle(_ context.Context, rec slog.Record) error {
	attrs := make(map[string]string, rec.NumAttrs())
	rec.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value.String()
		return true
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, Record{Level: rec.Level, Message: rec.Message, Attrs: attrs})
	return nil
}

// WithAttrs implements slog.Handler.
func (r *Records) WithAttrs([]slog.Attr) slog.Handler { return r }

// WithGroup implements slog.Handler.
func (r *Records) WithGroup(string) slog.Handler { return r }

// RequireLag checks r's lag attribute, a Duplicate's lag behind its first
// copy: absent only as a store's zero (Redis keeps a millisecond, so a copy
// arriving within one reads as none), else a duration from 0 to most.
func RequireLag(t testing.TB, r Record, most time.Duration) {
	t.Helper()
	s, ok := r.Attrs["lag"]
	if !ok {
		return
	}
	if lag, err := time.ParseDuration(s); err != nil || lag <= 0 || lag > most {
		t.Fatalf("lag %q: want a duration above 0 and at most %s (%v)", s, most, err)
	}
}
