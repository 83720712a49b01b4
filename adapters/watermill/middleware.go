package watermillonce

import (
	"context"
	"errors"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/jobonce/jobonce/core"
)

// source names Watermill in metrics and logs (Job.Source).
const source = "watermill"

// NewMiddleware returns a Watermill handler middleware that runs each
// message's job once through g. Add it to a router with AddMiddleware, or
// to one handler with Handler.AddMiddleware. cfg may be nil for the
// defaults.
//
// For each message the middleware derives a key (Config.Key) and claims it:
//
//   - The key is free: the handler runs, with the job's idempotency key and
//     fence in msg.Context(). That context is cancelled if the claim is
//     lost. Success records the done marker with the produced messages, and
//     returns them. The handler's error or panic releases the claim and
//     comes back unchanged.
//   - The key is done: the handler does not run, and the stored produced
//     messages are returned again. When they were not stored, the error
//     matches ErrProducedNotStored.
//   - Another copy runs: the copy waits for its outcome (Config.WaitRunning).
//     If the job still runs, the middleware nacks the message itself and
//     returns no error.
//   - The key holds a different payload, or is empty: an error for which
//     IsPoison reports true.
//   - The store fails: after Config.UnavailableDelay, an error matching
//     core.ErrStoreUnavailable. When the Guard fails open and the store
//     cannot be reached, the handler runs unguarded instead.
//   - The message's context ends before the claim is answered: the handler
//     does not run, and the error matches ctx.Err().
//
// docs/watermill.md has the details of each case. NewMiddleware returns an
// error for a nil Guard.
func NewMiddleware(g *core.Guard, cfg *Config) (message.HandlerMiddleware, error) {
	if g == nil {
		return nil, errors.New("jobonce: watermillonce: NewMiddleware: Guard is nil")
	}
	m := &middleware{g: g, cfg: cfg.withDefaults()}
	return m.wrap, nil
}

// MustMiddleware is NewMiddleware for the one-line router.AddMiddleware
// form. It panics with NewMiddleware's error.
func MustMiddleware(g *core.Guard, cfg *Config) message.HandlerMiddleware {
	mw, err := NewMiddleware(g, cfg)
	if err != nil {
		panic(err)
	}
	return mw
}

type middleware struct {
	g   *core.Guard
	cfg Config
}

func (m *middleware) wrap(next message.HandlerFunc) message.HandlerFunc {
	if next == nil {
		return func(*message.Message) ([]*message.Message, error) {
			return nil, errors.New("jobonce: watermillonce: the middleware was given a nil handler")
		}
	}
	return func(msg *message.Message) ([]*message.Message, error) {
		return m.handle(msg, next)
	}
}

func (m *middleware) handle(msg *message.Message, next message.HandlerFunc) ([]*message.Message, error) {
	ctx := msg.Context()
	handler := message.HandlerNameFromCtx(ctx)
	job, legacyKey := m.job(msg, handler, message.SubscribeTopicFromCtx(ctx))
	var produced []*message.Message
	unstored := false // produced, but over the Guard's MaxResultSize
	// run runs the handler under the claim whose job context is jobCtx,
	// with the idempotency key and fence of valuesCtx's.
	run := func(valuesCtx, jobCtx context.Context) ([]byte, error) {
		hctx, release := handlerContext(ctx, valuesCtx, jobCtx)
		msg.SetContext(hctx) // until the handler returns
		defer msg.SetContext(ctx)
		var err error
		func() {
			defer release() // before the Guard ends jobCtx, on every path
			produced, err = next(msg)
		}()
		if err != nil {
			return nil, err
		}
		result, stored := storedProduced(produced, encodeProduced(produced), m.g.MaxResultSize())
		unstored = !stored
		return result, nil
	}
	if !job.Unguarded {
		job.WaitUntil = m.waitUntil()
		job.HoldsWorker = true // a copy not kept waiting is held all the same (below)
	}
	var res core.Result
	var err error
	if legacyKey == "" {
		res, err = m.g.Run(ctx, job, func(jobCtx context.Context) ([]byte, error) { return run(jobCtx, jobCtx) })
	} else {
		res, err = m.runUnderLegacyKey(ctx, job, legacyKey, run)
	}
	if res.Outcome == core.Running && !job.WaitUntil.IsZero() {
		// A copy the Guard did not keep waiting (its running copy is
		// expected to run past the wait) is held as long all the same, so
		// that a backend which redelivers a nacked message at once does not
		// bring it straight back.
		pause(ctx, time.Until(job.WaitUntil))
	}
	switch {
	case err == nil && res.Outcome == core.Duplicate:
		msgs, err := m.reproduce(ctx, msg, res.Value)
		if err != nil {
			return nil, poison(msg, handler, err)
		}
		return msgs, nil
	case err == nil:
		if unstored && res.Outcome != core.Unguarded {
			m.g.Logger().WarnContext(ctx, "jobonce: watermillonce: the messages the handler produced are over core.Config.MaxResultSize and not stored with the done marker: a duplicate of the message cannot return them and goes to the poison path",
				"message_uuid", msg.UUID, "handler", handler, "produced", len(produced), "max_result_size", m.g.MaxResultSize())
		}
		return produced, nil
	case res.Outcome == core.Conflict, res.Outcome == core.Rejected:
		return nil, poison(msg, handler, err)
	case res.Outcome == core.Unavailable:
		pause(ctx, m.cfg.UnavailableDelay)
		return nil, err
	case res.Outcome == core.Running:
		// Back to the broker, but no handler failure: the router would log
		// an error at ERROR and count it. Nacked first, the message is not
		// acked by the router's Ack that follows a nil error.
		msg.Nack()
		return nil, nil
	case res.Outcome == core.Failed:
		return produced, err
	default: // Canceled
		return nil, err
	}
}

// reproduce returns the messages a duplicate's job produced when it ran,
// from the stored result, or an error matching ErrProducedNotStored when
// they were not stored or cannot be read: the copy cannot publish what the
// run produced, so it must not be acknowledged as if it had.
func (m *middleware) reproduce(ctx context.Context, msg *message.Message, stored []byte) ([]*message.Message, error) {
	msgs, err := decodeProduced(stored)
	if err != nil {
		m.g.Logger().WarnContext(ctx, "jobonce: watermillonce: a duplicate's produced messages are not stored; it goes to the poison path rather than being acknowledged without them",
			"message_uuid", msg.UUID, "handler", message.HandlerNameFromCtx(ctx), "error", err)
		return nil, err
	}
	return msgs, nil
}
