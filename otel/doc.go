// Package otel carries OpenTelemetry traces through the outbox and exposes the
// forwarder's and the inbox's metrics as OpenTelemetry instruments. It is a module of
// its own (github.com/relayer-go/watermill-outbox/otel), so that the library's module
// depends on no OpenTelemetry package; this one depends on OpenTelemetry's API and SDK
// and on nothing else.
//
// Wiring, each part optional:
//
//	cfg := otel.Config{} // the global tracer provider; W3C trace context and baggage
//
//	// Writer: the trace context of the transaction's context goes into each row.
//	ob, err := publisher.New(store, publisher.Config{ExtraMetadata: otel.ExtraMetadata(cfg)}, logger)
//
//	// Forwarder: each send is a producer span, child of the writer's span.
//	targets := otel.WrapTargets(forwarder.Targets{"": amqpPublisher}, map[string]string{"": "rabbitmq"}, cfg)
//	fwd, err := forwarder.New(store, targets, forwarder.Config{}, logger)
//
//	// Consumer: a process span per message (child of the send), marked by the inbox.
//	in, err := inbox.New(store, inbox.Config{Observe: otel.InboxObserver()}, logger)
//	handler.AddMiddleware(otel.ConsumerMiddleware(cfg), in.OutboxMiddleware(ob))
//
// One trace then holds the writer's span, a "send <topic>" span per message
// (messaging.system, messaging.destination.name, messaging.message.id,
// messaging.operation.type "send", and outbox.time_in_outbox_seconds,
// outbox.since_due_seconds, outbox.attempt, outbox.row.id, outbox.lane,
// outbox.ordering_key, outbox.transport), and the consumer's "process <topic>" span with
// outbox.inbox.duplicate and outbox.inbox.consumer.
//
// The metadata keys are the standard ones (traceparent, tracestate, baggage), so
// Watermill OpenTelemetry middleware of third parties that read or write message
// metadata through a W3C propagator interoperates on either side: a message that
// already carries a trace context is stored as it is, and a consumer middleware that
// extracts the context from metadata sees the send span as its parent.
//
// Time in outbox is measured from the row's created_at, the writer's clock when
// Publish buffered the message (the row has no commit time); a scheduled message's
// wait beyond its due time is outbox.since_due_seconds.
//
// With no tracer provider set (or OpenTelemetry's no-op one), the hooks cost nothing
// measurable: ExtraMetadata returns nil without allocating for a context without a span
// and without baggage (a Publish allocates what it does without the hook), and
// WrapTarget and ConsumerMiddleware hand the messages on as they are after one atomic
// load; a provider set later (otel.SetTracerProvider) is followed from then on.
// BenchmarkPublishOverhead, BenchmarkDrainOverhead and BenchmarkWrapTargetCPU measure
// it (figures in benchmarks/README.md).
//
// Metrics: NewForwarderMetrics and NewInboxMetrics are the twins of forwarder/prometheus
// and inbox/prometheus: the same metrics, labels and units, under instrument names that
// OpenTelemetry's Prometheus exporter turns into the Prometheus adapters' names
// (outbox.forwarder.messages_sent becomes outbox_forwarder_messages_sent_total).
package otel
