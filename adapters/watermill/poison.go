package watermillonce

import (
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
)

// IsPoison reports whether err is the middleware's verdict that a message
// can never be handled, so redelivering it cannot help: its key is held or
// done with a different payload (core.ErrConflict), its key is empty
// (core.ErrInvalidKey), or it is a duplicate whose run's produced messages
// were not stored (ErrProducedNotStored). It is the filter for watermill's
// middleware.PoisonQueueWithFilter:
//
//	poison, err := middleware.PoisonQueueWithFilter(pub, "poison", watermillonce.IsPoison)
//
// It reports false for every other error: a job running elsewhere
// (core.ErrRunning: NewPublisher's, for a message another Publish is
// publishing; the middleware nacks a running copy with no error), a store
// failure (core.ErrStoreUnavailable), an ended context and the handler's
// own errors. Never send the first two to a poison queue: the message would
// leave its topic while its job may still need it (the running copy may
// fail, the store may come back), and it would be lost.
func IsPoison(err error) bool {
	var p *poisonError
	return errors.As(err, &p)
}

// poisonError is the middleware's error for a message that can never be
// handled. It matches the cause (core.ErrConflict, core.ErrInvalidKey or
// ErrProducedNotStored).
type poisonError struct{ err error }

func (e *poisonError) Error() string { return e.err.Error() }
func (e *poisonError) Unwrap() error { return e.err }

// poison returns the error for msg, handled by handler, that the Guard
// refused with err.
func poison(msg *message.Message, handler string, err error) error {
	return &poisonError{err: fmt.Errorf("jobonce: watermillonce: message %s (handler %q) is not retried: %w", msg.UUID, handler, err)}
}

// ErrProducedNotStored reports a duplicate whose run's produced messages
// are not stored with its done marker in a form this release reads: they
// were over core.Config.MaxResultSize, or stored in an encoding it does not
// know. The duplicate cannot return them, so it is not acknowledged: the
// middleware's error matches it, and IsPoison reports true.
var ErrProducedNotStored = errors.New("jobonce: watermillonce: the messages the run produced are not stored with its done marker")
