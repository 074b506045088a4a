package otel

import (
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// InboxObserver returns the inbox.Config.Observe function that marks the span in the
// message's context (ConsumerMiddleware's, or any tracing middleware's around the
// inbox) with AttrInboxDuplicate (true for a message the consumer had applied, whose
// handler the inbox skipped; false otherwise) and AttrInboxConsumer, and adds an event
// "outbox.inbox.duplicate" to a duplicate's span.
func InboxObserver() func(msg *message.Message, consumer string, duplicate bool) {
	return func(msg *message.Message, consumer string, duplicate bool) {
		span := trace.SpanFromContext(msg.Context())
		if !span.IsRecording() {
			return
		}
		span.SetAttributes(AttrInboxDuplicate.Bool(duplicate), AttrInboxConsumer.String(consumer))
		if duplicate {
			span.AddEvent("outbox.inbox.duplicate")
		}
	}
}

// ConsumerMiddleware returns a router middleware that makes each handled message a
// consumer span "process <topic>", a child of the trace context in its metadata (the
// forwarder's send span, through WrapTarget), with the messaging semantic conventions
// (destination, message id, operation process). The span is in msg.Context() for the
// handler and the middleware inside this one: the inbox's (InboxObserver marks
// duplicates on it) and the publisher's (a transaction begun there records this span
// as the parent of the messages the handler publishes). Place it outside both.
func ConsumerMiddleware(cfg Config) message.HandlerMiddleware {
	cfg.setDefaults()
	tracer := cfg.tracer()
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			if cfg.tracingOff() {
				return h(msg)
			}
			ctx := cfg.Propagator.Extract(msg.Context(), propagation.MapCarrier(msg.Metadata))
			topic := message.SubscribeTopicFromCtx(msg.Context())
			ctx, span := tracer.Start(ctx, "process "+topic, trace.WithSpanKind(trace.SpanKindConsumer),
				trace.WithAttributes(
					semconv.MessagingOperationTypeProcess,
					semconv.MessagingOperationName("process"),
					semconv.MessagingDestinationName(topic),
					semconv.MessagingMessageID(msg.UUID),
					semconv.MessagingConsumerGroupName(message.HandlerNameFromCtx(msg.Context())),
				))
			defer span.End()
			orig := msg.Context()
			msg.SetContext(ctx)
			msgs, err := h(msg)
			msg.SetContext(orig)
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			return msgs, err
		}
	}
}
