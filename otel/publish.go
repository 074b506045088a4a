package otel

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ExtraMetadata returns the publisher.Config.ExtraMetadata function that records the
// trace context and baggage of the transaction's context in the stored row's metadata
// (with the default propagator: traceparent, tracestate, baggage), so that the
// forwarder's send and the consumer continue the writer's trace:
//
//	ob, err := publisher.New(store, publisher.Config{ExtraMetadata: otel.ExtraMetadata(otel.Config{})}, logger)
//
// A message that already carries one of the propagator's keys (a decorator put it
// there) is stored as it is. A context without a valid span and without baggage adds
// nothing, and allocates nothing.
func ExtraMetadata(cfg Config) func(ctx context.Context, topic string, msg *message.Message) (message.Metadata, error) {
	cfg.setDefaults()
	prop := cfg.Propagator
	fields := prop.Fields()
	return func(ctx context.Context, _ string, msg *message.Message) (message.Metadata, error) {
		if !trace.SpanContextFromContext(ctx).IsValid() && baggage.FromContext(ctx).Len() == 0 {
			return nil, nil
		}
		for _, f := range fields {
			if _, ok := msg.Metadata[f]; ok {
				return nil, nil
			}
		}
		md := message.Metadata{}
		prop.Inject(ctx, propagation.MapCarrier(md))
		if len(md) == 0 {
			return nil, nil
		}
		return md, nil
	}
}
