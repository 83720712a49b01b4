package testenv

import (
	"context"
	"log/slog"
	"sync"
)

// Warnings is a slog.Handler that keeps the messages of records at Warn and
// above and discards the rest, for tests that assert an outcome was (or was
// not) warned about. The zero value is ready; it is safe for concurrent use.
type Warnings struct {
	mu   sync.Mutex
	msgs []string
}

// Logger returns a logger that writes to w.
func (w *Warnings) Logger() *slog.Logger { return slog.New(w) }

// Messages returns the messages kept so far.
func (w *Warnings) Messages() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.msgs...)
}

// Enabled implements slog.Handler.
func (w *Warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

// Handle implements slog.Handler.
func (w *Warnings) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, r.Message)
	return nil
}

// WithAttrs implements slog.Handler.
func (w *Warnings) WithAttrs([]slog.Attr) slog.Handler { return w }

// WithGroup implements slog.Handler.
func (w *Warnings) WithGroup(string) slog.Handler { return w }
