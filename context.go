package outbox

import "context"

type forwardedKey struct{}

// ContextWithForwarded returns ctx marked as the context of a message that a forwarder
// emitted from an outbox row, carrying v (the forwarder's own description of the row).
// It is the seam between the forwarder and the publisher: publisher.Middleware leaves a
// message so marked alone instead of opening an outbox transaction for it, so that the
// middleware can be installed router-wide beside a forwarder.
func ContextWithForwarded(ctx context.Context, v any) context.Context {
	return context.WithValue(ctx, forwardedKey{}, v)
}

// WithoutForwarded returns ctx with the mark of ContextWithForwarded hidden: a message
// a forwarder hands to its target publisher carries the rest of its context, but an
// in-process Pub/Sub that keeps contexts (gochannel's PreserveContext) must not carry
// the mark to other handlers, whose publisher or inbox middleware would take their
// messages for forwarded ones.
func WithoutForwarded(ctx context.Context) context.Context {
	return context.WithValue(ctx, forwardedKey{}, nil)
}

// ForwardedFromContext returns the value ContextWithForwarded stored in ctx (or a
// context derived from it), and whether there was one.
func ForwardedFromContext(ctx context.Context) (any, bool) {
	v := ctx.Value(forwardedKey{})
	return v, v != nil
}
