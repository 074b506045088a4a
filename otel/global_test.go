package otel_test

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	gotel "go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"

	outboxotel "github.com/relayer-go/watermill-outbox/otel"
)

// A target wrapped before the application sets its global tracer provider passes the
// messages through untouched while none is set, traces them once one is, and passes
// them through again under OpenTelemetry's no-op provider.
func TestWrapTargetFollowsTheGlobalProvider(t *testing.T) {
	msgs := forwardedMessages(t, 3)
	target := &capturingTarget{}
	wrapped := outboxotel.WrapTarget(target, outboxotel.TargetConfig{System: "kafka"})
	publish := func() []*message.Message {
		t.Helper()
		target.msgs = nil
		if err := wrapped.Publish("orders", msgs...); err != nil {
			t.Fatal(err)
		}
		return target.msgs
	}
	for i, m := range publish() {
		if m != msgs[i] {
			t.Fatalf("with no provider set, message %d was replaced", i)
		}
	}
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	gotel.SetTracerProvider(tp)
	defer gotel.SetTracerProvider(noop.NewTracerProvider())
	sent := publish()
	if len(exp.GetSpans()) != 3 {
		t.Fatalf("%d spans after the provider was set, want 3", len(exp.GetSpans()))
	}
	for i, m := range sent {
		span := exp.GetSpans()[i]
		if m == msgs[i] || m.UUID != msgs[i].UUID || string(m.Payload) != string(msgs[i].Payload) {
			t.Errorf("message %d: not a copy of the forwarded message", i)
		}
		if span.Parent.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || span.Parent.SpanID().String() != "b7ad6b7169203331" {
			t.Errorf("span %d: parent %s/%s, want the stored traceparent's", i, span.Parent.TraceID(), span.Parent.SpanID())
		}
		want := "00-" + span.SpanContext.TraceID().String() + "-" + span.SpanContext.SpanID().String() + "-01"
		if m.Metadata.Get("traceparent") != want {
			t.Errorf("message %d carries traceparent %q, want the send span's %q", i, m.Metadata.Get("traceparent"), want)
		}
		if msgs[i].Metadata.Get("traceparent") != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" {
			t.Errorf("the forwarder's message %d was changed", i)
		}
	}
	gotel.SetTracerProvider(noop.NewTracerProvider())
	for i, m := range publish() {
		if m != msgs[i] {
			t.Fatalf("under the no-op provider, message %d was replaced", i)
		}
	}
}
