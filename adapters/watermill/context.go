package watermillonce

import "context"

// handlerContext returns the context a guarded handler runs with, as
// msg.Context(): the values of valuesCtx (the message's own, and its job's
// idempotency key and fence), and the message's own deadline and
// cancellation, so that a message the handler produces with it lives as
// long as it would without the middleware: the router publishes it after
// the middleware has returned, when the job's context has ended. While the
// handler runs, the end of jobCtx (the claim's lease lost) cancels it too,
// with jobCtx's cause; release, called when the handler returns, stops
// that.
func handlerContext(msgCtx, valuesCtx, jobCtx context.Context) (ctx context.Context, release func()) {
	ctx, cancel := context.WithCancelCause(messageLife{Context: msgCtx, values: context.WithoutCancel(valuesCtx)})
	stop := context.AfterFunc(jobCtx, func() { cancel(context.Cause(jobCtx)) })
	return ctx, func() { stop() }
}

// messageLife is a context with the deadline and cancellation of the
// message's own context and the values of another.
type messageLife struct {
	context.Context // the message's own: its deadline and cancellation
	values          context.Context
}

func (c messageLife) Value(key any) any { return c.values.Value(key) }

// AfterFunc lets a context derived from c follow the message's own
// cancellation without a goroutine of its own.
func (c messageLife) AfterFunc(f func()) func() bool { return context.AfterFunc(c.Context, f) }
