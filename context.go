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

// ForwardedFromContext returns the value ContextWithForwarded stored in ctx (or a
// context derived from it), and whether there was one.
func ForwardedFromContext(ctx context.Context) (any, bool) {
	v := ctx.Value(forwardedKey{})
	return v, v != nil
}
