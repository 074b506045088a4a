package otel

import (
	"context"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/forwarder"
)

// Attributes of the forwarder's send spans beside the messaging semantic conventions,
// and of the consumer's span.
const (
	// AttrTimeInOutbox is the time, in seconds, from the row's created_at (the writer's
	// clock when Publish buffered the message, shortly before its commit) to the start
	// of this send.
	AttrTimeInOutbox = attribute.Key("outbox.time_in_outbox_seconds")
	// AttrSinceDue is the time, in seconds, from the row's deliver_at to the start of
	// this send (equal to AttrTimeInOutbox for a message due at once).
	AttrSinceDue = attribute.Key("outbox.since_due_seconds")
	// AttrAttempt is this send's attempt number: 1 for the first, failed attempts + 1.
	AttrAttempt = attribute.Key("outbox.attempt")
	// AttrRowID is the outbox row's id (ULID text).
	AttrRowID = attribute.Key("outbox.row.id")
	// AttrLane is the row's lane, -1 for an unordered row.
	AttrLane = attribute.Key("outbox.lane")
	// AttrOrderingKey is the row's ordering key (absent when it has none).
	AttrOrderingKey = attribute.Key("outbox.ordering_key")
	// AttrTransport is the name of the forwarder's target publisher ("" = the default).
	AttrTransport = attribute.Key("outbox.transport")
	// AttrInboxDuplicate marks a consumer's span: true when the inbox found the message
	// applied already and skipped the handler.
	AttrInboxDuplicate = attribute.Key("outbox.inbox.duplicate")
	// AttrInboxConsumer names the inbox consumer the message was recorded for.
	AttrInboxConsumer = attribute.Key("outbox.inbox.consumer")
)

// TargetConfig configures WrapTarget.
type TargetConfig struct {
	Config
	// System is the messaging.system attribute of the sends ("rabbitmq", "kafka",
	// "nats", ...). Defaults to "" (the attribute is left out).
	System string
	// Link makes each send span a new trace linked to the producer's span instead of
	// its child. Defaults to false (child).
	Link bool
	// Now reads the clock the time in outbox is measured with. Defaults to time.Now.
	Now func() time.Time
}

// WrapTargets returns targets with every publisher wrapped by WrapTarget; systems names
// the messaging.system of each transport (missing: none).
func WrapTargets(targets forwarder.Targets, systems map[string]string, cfg Config) forwarder.Targets {
	out := make(forwarder.Targets, len(targets))
	for name, pub := range targets {
		out[name] = WrapTarget(pub, TargetConfig{Config: cfg, System: systems[name]})
	}
	return out
}

// WrapTarget returns a publisher that sends through pub and makes each message a
// forwarder emitted (forwarder.RowFromContext) a producer span "send <topic>": a child
// of the span whose context the row's metadata carries (ExtraMetadata stored it), with
// the messaging semantic conventions (system, destination name, message id, operation
// send) and the row's facts (AttrTimeInOutbox, AttrAttempt, ...). The message sent
// carries the send span's context in place of the stored one, so the consumer's span
// is the send's child. Messages of other origin pass through unchanged.
//
// With no tracer provider set (or OpenTelemetry's no-op one) the messages go out as
// they are, with the writer's trace context the row stored, at the cost of one atomic
// load per call; a tracer that does not record a span (a sampler's decision) leaves
// that message as it is too.
func WrapTarget(pub message.Publisher, cfg TargetConfig) message.Publisher {
	cfg.setDefaults()
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &tracedTarget{pub: pub, cfg: cfg, tracer: cfg.tracer()}
}

type tracedTarget struct {
	pub    message.Publisher
	cfg    TargetConfig
	tracer trace.Tracer
}

// Publish implements message.Publisher.
func (t *tracedTarget) Publish(topic string, msgs ...*message.Message) error {
	if t.cfg.tracingOff() {
		return t.pub.Publish(topic, msgs...)
	}
	var spans []trace.Span
	var out []*message.Message
	for i, msg := range msgs {
		row, ok := forwarder.RowFromContext(msg.Context())
		if !ok {
			continue
		}
		span, sent := t.start(topic, msg, row)
		if span == nil {
			continue
		}
		if out == nil {
			out = make([]*message.Message, len(msgs))
			copy(out, msgs)
		}
		out[i] = sent
		spans = append(spans, span)
	}
	if out == nil {
		return t.pub.Publish(topic, msgs...)
	}
	err := t.pub.Publish(topic, out...)
	for _, s := range spans {
		if err != nil {
			s.RecordError(err)
			s.SetStatus(codes.Error, err.Error())
		}
		s.End()
	}
	return err
}

// start begins msg's send span and returns it with the message to send (a copy
// carrying the span's context), or nil when the span does not record. The attributes
// a sampler may read (messaging ones) go in at the start; the row's, which take
// formatting, only into a recording span.
func (t *tracedTarget) start(topic string, msg *message.Message, row forwarder.Row) (trace.Span, *message.Message) {
	now := t.cfg.Now()
	stored := trace.SpanContextFromContext(t.cfg.Propagator.Extract(context.Background(), propagation.MapCarrier(msg.Metadata)))
	parent := msg.Context()
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer), trace.WithTimestamp(now),
		trace.WithAttributes(t.startAttributes(topic, msg)...)}
	if t.cfg.Link && stored.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: stored}), trace.WithNewRoot())
	} else if stored.IsValid() {
		parent = trace.ContextWithRemoteSpanContext(parent, stored)
	}
	ctx, span := t.tracer.Start(parent, "send "+topic, opts...)
	if !span.IsRecording() {
		return nil, nil
	}
	span.SetAttributes(rowAttributes(row, now)...)
	sent := msg.Copy()
	t.cfg.Propagator.Inject(ctx, propagation.MapCarrier(sent.Metadata))
	sent.SetContext(ctx)
	return span, sent
}

// startAttributes are the messaging semantic conventions of a send.
func (t *tracedTarget) startAttributes(topic string, msg *message.Message) []attribute.KeyValue {
	attrs := []attribute.KeyValue{
		semconv.MessagingOperationTypeSend,
		semconv.MessagingOperationName("send"),
		semconv.MessagingDestinationName(topic),
		semconv.MessagingMessageID(msg.UUID),
	}
	if t.cfg.System != "" {
		attrs = append(attrs, semconv.MessagingSystemKey.String(t.cfg.System))
	}
	return attrs
}

// rowAttributes are the outbox row's facts at the send.
func rowAttributes(row forwarder.Row, now time.Time) []attribute.KeyValue {
	attrs := []attribute.KeyValue{
		AttrTimeInOutbox.Float64(seconds(now.Sub(row.CreatedAt))),
		AttrSinceDue.Float64(seconds(now.Sub(row.DeliverAt))),
		AttrAttempt.Int(row.Attempts + 1),
		AttrRowID.String(row.ID.String()),
		AttrLane.Int(row.Lane),
		AttrTransport.String(row.Transport),
	}
	if row.Lane != outbox.Unordered && row.OrderingKey != "" {
		attrs = append(attrs, AttrOrderingKey.String(row.OrderingKey))
	}
	return attrs
}

func seconds(d time.Duration) float64 { return max(d.Seconds(), 0) }

// Close closes the wrapped publisher.
func (t *tracedTarget) Close() error { return t.pub.Close() }
