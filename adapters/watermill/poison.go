package watermillonce

import (
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
)

// IsPoison reports whether err is the middleware's verdict that a message
// can never be handled. That is a conflict (core.ErrConflict), an empty key
// (core.ErrInvalidKey), or a duplicate whose produced messages were not
// stored (ErrProducedNotStored). It is the filter for
// middleware.PoisonQueueWithFilter:
//
//	poison, err := middleware.PoisonQueueWithFilter(pub, "poison", watermillonce.IsPoison)
//
// It reports false for every other error, such as core.ErrRunning and
// core.ErrStoreUnavailable. docs/watermill.md explains why those must
// never reach a poison queue.
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
// are not stored with its done marker in a form this package reads. They
// were over core.Config.MaxResultSize, or stored in an unknown encoding.
// The duplicate is not acknowledged: the middleware's error matches
// ErrProducedNotStored, and IsPoison reports true for it.
var ErrProducedNotStored = errors.New("jobonce: watermillonce: the messages the run produced are not stored with its done marker")
