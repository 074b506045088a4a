package e2e_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/e2e/internal/brokers"
	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/inbox"
	"github.com/relayer-go/watermill-outbox/internal/chaos"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	outboxotel "github.com/relayer-go/watermill-outbox/otel"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// TestE2E_OpenTelemetryTrace: a producer's transaction (a span) publishes two messages,
// one with an ordering key (sent by a lane worker) and one without; the forwarder
// sends them to RabbitMQ through otel.WrapTarget; a consumer with ConsumerMiddleware and
// the inbox processes each, then receives one of them again (a redelivery). Over the
// SDK's in-memory exporter the whole is one trace: producer span -> send span (child,
// messaging attributes, time in outbox, attempt 1) -> process span (child, duplicate
// false), and the redelivery's process span is a child of the same send span marked
// outbox.inbox.duplicate=true. The forwarder's and the inbox's OpenTelemetry metrics
// count the two sends, the two first deliveries and the duplicate.
func TestE2E_OpenTelemetryTrace(t *testing.T) {
	for _, e := range chaos.Engines {
		t.Run(e.Name, func(t *testing.T) {
			t.Parallel()
			testOpenTelemetryTrace(t, e)
		})
	}
}

func testOpenTelemetryTrace(t *testing.T, e chaos.Engine) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	cfg := outboxotel.Config{TracerProvider: tp}

	db, _ := e.Open(t)
	store := e.Table(t, db, 8)
	amqpCfg := brokers.AMQPConfig(testenv.DSN(t, testenv.AMQP))
	topic := chaos.UniqueName("outbox_otel_")
	sub := brokers.AMQPSubscriber(t, amqpCfg, topic)
	amqpPub := brokers.AMQPPublisher(t, amqpCfg)

	// The forwarder's and the inbox's metrics as OpenTelemetry instruments.
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	fm, err := outboxotel.NewForwarderMetrics(outboxotel.MetricsConfig{MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	im, err := outboxotel.NewInboxMetrics(outboxotel.MetricsConfig{MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}

	fwd := chaos.NewForwarder(t, store, outboxotel.WrapTargets(forwarder.Targets{"": amqpPub}, map[string]string{"": "rabbitmq"}, cfg),
		forwarder.Config{Metrics: fm.Forwarder("orders")})
	chaos.RunForwarder(t, fwd)

	var mu sync.Mutex
	received := map[string][]*message.Message{}
	consumer := consumerRouter(t, store, cfg, im, sub, topic, func(msg *message.Message) {
		mu.Lock()
		defer mu.Unlock()
		received[msg.UUID] = append(received[msg.UUID], msg)
	})
	chaos.RunRouter(t, consumer)

	// The producer: one span around one outbox transaction.
	ob, err := publisher.New(store, publisher.Config{ExtraMetadata: outboxotel.ExtraMetadata(cfg)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, root := tp.Tracer("app").Start(context.Background(), "place order")
	keyed := message.NewMessage(watermill.NewUUID(), []byte("order 42 placed"))
	keyed.Metadata.Set(publisher.MetadataOrderingKey, "order-42")
	plain := message.NewMessage(watermill.NewUUID(), []byte("audit"))
	err = ob.WithTx(ctx, func(ctx context.Context, tx *publisher.Tx) error { return tx.Publish(topic, keyed, plain) })
	root.End()
	if err != nil {
		t.Fatal(err)
	}
	count := func(uuid string) int { mu.Lock(); defer mu.Unlock(); return len(received[uuid]) }
	chaos.WaitFor(t, 30*time.Second, "both messages processed", func() bool { return count(keyed.UUID) == 1 && count(plain.UUID) == 1 })

	// A redelivery: the broker hands the consumer the message it had already received.
	mu.Lock()
	first := received[keyed.UUID][0]
	mu.Unlock()
	again := message.NewMessage(first.UUID, first.Payload)
	again.Metadata = first.Metadata
	if err := amqpPub.Publish(topic, again); err != nil {
		t.Fatal(err)
	}
	duplicate := func() bool { return len(processSpans(exp.GetSpans(), keyed.UUID)) == 2 }
	chaos.WaitFor(t, 30*time.Second, "the redelivery's span", duplicate)

	checkTrace(t, exp.GetSpans(), root, topic, keyed.UUID, plain.UUID)
	chaos.WaitFor(t, 10*time.Second, "the metrics", func() bool {
		m := sums(t, reader)
		return m[outboxotel.ForwarderMessagesSent] == 2 && m[outboxotel.InboxRecorded] == 1+1 && m[outboxotel.InboxDuplicates] == 1
	})
}

// sums returns the total of each int64 counter reader collects.
func sums(t *testing.T, reader *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, p := range sum.DataPoints {
					out[m.Name] += p.Value
				}
			}
		}
	}
	return out
}

// consumerRouter runs handle under ConsumerMiddleware and the inbox (consumer
// "billing", Observe marking the span).
func consumerRouter(t *testing.T, store outbox.Store, cfg outboxotel.Config, metrics inbox.Metrics, sub message.Subscriber, topic string, handle func(*message.Message)) *message.Router {
	t.Helper()
	in, err := inbox.New(store.(outbox.Inbox), inbox.Config{Consumer: inbox.ConsumerName("billing"), Observe: outboxotel.InboxObserver(), Metrics: metrics}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ob, err := publisher.New(store, publisher.Config{ExtraMetadata: outboxotel.ExtraMetadata(cfg)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	h := router.AddConsumerHandler("billing", topic, sub, func(msg *message.Message) error {
		handle(msg)
		return nil
	})
	h.AddMiddleware(outboxotel.ConsumerMiddleware(cfg), in.OutboxMiddleware(ob))
	return router
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// spansOf returns the spans named name whose messaging.message.id is uuid, by start.
func spansOf(spans tracetest.SpanStubs, name, uuid string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name && attrs(s)["messaging.message.id"].AsString() == uuid {
			out = append(out, s)
		}
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].StartTime.Before(out[j-1].StartTime); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

func processSpans(spans tracetest.SpanStubs, uuid string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.SpanKind == trace.SpanKindConsumer && attrs(s)["messaging.message.id"].AsString() == uuid {
			out = append(out, s)
		}
	}
	return out
}

func checkTrace(t *testing.T, spans tracetest.SpanStubs, root trace.Span, topic, keyedUUID, plainUUID string) {
	t.Helper()
	rootSC := root.SpanContext()
	for _, s := range spans {
		if s.SpanContext.TraceID() != rootSC.TraceID() {
			t.Errorf("span %q is in trace %s, not the producer's %s", s.Name, s.SpanContext.TraceID(), rootSC.TraceID())
		}
	}
	for _, uuid := range []string{keyedUUID, plainUUID} {
		sends := spansOf(spans, "send "+topic, uuid)
		if len(sends) != 1 {
			t.Fatalf("message %s: %d send spans, want 1", uuid, len(sends))
		}
		send := sends[0]
		a := attrs(send)
		if send.Parent.SpanID() != rootSC.SpanID() || send.SpanKind != trace.SpanKindProducer {
			t.Errorf("send span of %s: parent %s kind %s, want the producer's span %s, producer kind", uuid, send.Parent.SpanID(), send.SpanKind, rootSC.SpanID())
		}
		if a["messaging.system"].AsString() != "rabbitmq" || a["messaging.destination.name"].AsString() != topic ||
			a["messaging.operation.type"].AsString() != "send" || a[outboxotel.AttrAttempt].AsInt64() != 1 {
			t.Errorf("send span of %s: attributes %v", uuid, send.Attributes)
		}
		if v, ok := a[outboxotel.AttrTimeInOutbox]; !ok || v.AsFloat64() <= 0 || v.AsFloat64() > 30 {
			t.Errorf("send span of %s: time in outbox %v, want a positive number of seconds", uuid, v.AsFloat64())
		}
		procs := spansOf(spans, "process "+topic, uuid)
		want := 1
		if uuid == keyedUUID {
			want = 2
			if a[outboxotel.AttrOrderingKey].AsString() != "order-42" {
				t.Errorf("send span of the keyed message: ordering key %q", a[outboxotel.AttrOrderingKey].AsString())
			}
		}
		if len(procs) != want {
			t.Fatalf("message %s: %d process spans, want %d", uuid, len(procs), want)
		}
		for i, p := range procs {
			pa := attrs(p)
			if p.Parent.SpanID() != send.SpanContext.SpanID() {
				t.Errorf("process span %d of %s: parent %s, want the send span %s", i, uuid, p.Parent.SpanID(), send.SpanContext.SpanID())
			}
			if !p.StartTime.After(send.StartTime) || !send.StartTime.After(spanStart(spans, rootSC)) {
				t.Errorf("process span %d of %s: starts are not in producer, send, process order", i, uuid)
			}
			if dup := pa[outboxotel.AttrInboxDuplicate].AsBool(); dup != (i == 1) || pa[outboxotel.AttrInboxConsumer].AsString() != "billing" {
				t.Errorf("process span %d of %s: duplicate=%v consumer %q, want duplicate=%v", i, uuid, dup, pa[outboxotel.AttrInboxConsumer].AsString(), i == 1)
			}
		}
	}
}

func spanStart(spans tracetest.SpanStubs, sc trace.SpanContext) time.Time {
	for _, s := range spans {
		if s.SpanContext.SpanID() == sc.SpanID() {
			return s.StartTime
		}
	}
	return time.Time{}
}
