package otel_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	outboxotel "github.com/relayer-go/watermill-outbox/otel"
)

// With Link, each send starts a trace of its own linked to the stored span; without,
// it is the stored span's child. Either way it is a producer span with the messaging
// conventions and the row's facts, and the message sent carries the send span.
func TestWrapTargetChildOrLink(t *testing.T) {
	msgs := forwardedMessages(t, 2)
	stored := "0af7651916cd43dd8448eb211c80319c"
	for _, link := range []bool{false, true} {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		target := &capturingTarget{}
		now := time.Now().Add(time.Minute)
		wrapped := outboxotel.WrapTarget(target, outboxotel.TargetConfig{Config: outboxotel.Config{TracerProvider: tp}, System: "rabbitmq",
			Link: link, Now: func() time.Time { return now }})
		if err := wrapped.Publish("orders", msgs...); err != nil {
			t.Fatal(err)
		}
		spans := exp.GetSpans()
		if len(spans) != len(msgs) {
			t.Fatalf("link %v: %d spans", link, len(spans))
		}
		for i, s := range spans {
			a := map[string]any{}
			for _, kv := range s.Attributes {
				a[string(kv.Key)] = kv.Value.AsInterface()
			}
			if link {
				if s.Parent.IsValid() || len(s.Links) != 1 || s.Links[0].SpanContext.TraceID().String() != stored || s.SpanContext.TraceID().String() == stored {
					t.Errorf("link: span %d parent %v links %+v trace %s", i, s.Parent, s.Links, s.SpanContext.TraceID())
				}
			} else if s.Parent.TraceID().String() != stored || len(s.Links) != 0 {
				t.Errorf("child: span %d parent %s links %d", i, s.Parent.TraceID(), len(s.Links))
			}
			if s.Name != "send orders" || s.SpanKind != trace.SpanKindProducer || a["messaging.system"] != "rabbitmq" ||
				a["messaging.operation.type"] != "send" || a["messaging.destination.name"] != "orders" || a["messaging.message.id"] != msgs[i].UUID ||
				a[string(outboxotel.AttrAttempt)] != int64(1) || a[string(outboxotel.AttrLane)] != int64(-1) {
				t.Errorf("span %d: %s %s %v", i, s.Name, s.SpanKind, a)
			}
			if sec, _ := a[string(outboxotel.AttrTimeInOutbox)].(float64); sec < 59 || sec > 120 {
				t.Errorf("span %d: time in outbox %v s, want about a minute", i, a[string(outboxotel.AttrTimeInOutbox)])
			}
			want := "00-" + s.SpanContext.TraceID().String() + "-" + s.SpanContext.SpanID().String() + "-01"
			if got := target.msgs[i].Metadata.Get("traceparent"); got != want {
				t.Errorf("span %d: message carries %s, want %s", i, got, want)
			}
		}
		_ = tp.Shutdown(context.Background())
	}
}
