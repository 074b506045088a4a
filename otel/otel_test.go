package otel_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/baggage"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	outbox "github.com/relayer-go/watermill-outbox"
	outboxotel "github.com/relayer-go/watermill-outbox/otel"
)

// ExtraMetadata writes traceparent (and baggage) from a context with a span, nothing
// from a context without one, and nothing for a message that carries its own.
func TestExtraMetadata(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	extra := outboxotel.ExtraMetadata(outboxotel.Config{})
	ctx, span := tp.Tracer("t").Start(context.Background(), "tx")
	defer span.End()
	member, _ := baggage.NewMember("tenant", "acme")
	bag, _ := baggage.New(member)
	ctx = baggage.ContextWithBaggage(ctx, bag)

	md, err := extra(ctx, "topic", message.NewMessage("1", nil))
	if err != nil {
		t.Fatal(err)
	}
	want := "00-" + span.SpanContext().TraceID().String() + "-" + span.SpanContext().SpanID().String() + "-01"
	if md["traceparent"] != want || md["baggage"] != "tenant=acme" {
		t.Errorf("metadata %v, want traceparent %s and baggage tenant=acme", md, want)
	}
	own := message.NewMessage("2", nil)
	own.Metadata.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	if md, _ := extra(ctx, "topic", own); md != nil {
		t.Errorf("a message with its own traceparent got %v", md)
	}
	if md, _ := extra(context.Background(), "topic", message.NewMessage("3", nil)); md != nil {
		t.Errorf("a context without a span got %v", md)
	}
	allocs := testing.AllocsPerRun(100, func() { _, _ = extra(context.Background(), "topic", own) })
	if allocs != 0 {
		t.Errorf("ExtraMetadata without a span allocates %v times", allocs)
	}
}

func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// promName is what OpenTelemetry's Prometheus exporter names an instrument.
func promName(m metricdata.Metrics) string {
	name := ""
	for _, r := range m.Name {
		if r == '.' {
			r = '_'
		}
		name += string(r)
	}
	if m.Unit == "s" {
		name += "_seconds"
	}
	if _, ok := m.Data.(metricdata.Sum[int64]); ok {
		name += "_total"
	}
	return name
}

// The forwarder and inbox instruments carry the Prometheus adapters' names (as the
// exporter translates them), labels and values; a drained lane's series ends.
func TestMetricsMatchPrometheusAdapters(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	fm, err := outboxotel.NewForwarderMetrics(outboxotel.MetricsConfig{MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	im, err := outboxotel.NewInboxMetrics(outboxotel.MetricsConfig{MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	f := fm.Forwarder("orders")
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	f.MessageSent(outbox.Unordered)
	f.MessageSent(3)
	f.MessageFailed(3)
	f.MessageParked(3)
	f.InFlight(3, 2)
	f.LanesHeld(4)
	f.Backlog(outbox.Stats{Lanes: []outbox.LaneStats{{Lane: 3, Eligible: 7, OldestEligible: now.Add(-1500 * time.Millisecond)}}, Parked: 1}, now)
	im.Recorded("billing")
	im.Duplicate("billing")
	im.Pruned(5)
	im.Entries(outbox.InboxStats{Consumers: []outbox.InboxConsumerStats{{Consumer: "billing", Entries: 9, Duplicates: 1}}})

	got := collect(t, reader)
	want := []string{
		"outbox_forwarder_messages_sent_total", "outbox_forwarder_messages_failed_total", "outbox_forwarder_messages_parked_total",
		"outbox_forwarder_messages_in_flight", "outbox_forwarder_backlog_rows", "outbox_forwarder_oldest_eligible_age_seconds",
		"outbox_forwarder_parked_rows", "outbox_forwarder_lanes_held",
		"outbox_inbox_recorded_total", "outbox_inbox_duplicates_total", "outbox_inbox_pruned_total",
		"outbox_inbox_entries", "outbox_inbox_stored_duplicates",
	}
	names := map[string]metricdata.Metrics{}
	for _, m := range got {
		names[promName(m)] = m
	}
	for _, w := range want {
		if _, ok := names[w]; !ok {
			t.Errorf("no instrument the exporter names %s (have %v)", w, keys(names))
		}
	}
	age := got[outboxotel.ForwarderOldestEligibleAge].Data.(metricdata.Gauge[float64]).DataPoints
	if len(age) != 1 || age[0].Value != 1.5 {
		t.Errorf("oldest eligible age %+v, want one point of 1.5 s", age)
	}
	if lane, _ := age[0].Attributes.Value("lane"); lane.AsString() != "3" {
		t.Errorf("age lane label %q, want 3", lane.AsString())
	}
	sent := got[outboxotel.ForwarderMessagesSent].Data.(metricdata.Sum[int64]).DataPoints
	if len(sent) != 2 {
		t.Errorf("sent has %d series, want 2 (unordered, 3)", len(sent))
	}
	// Lane 3 drains: its backlog series ends.
	f.Backlog(outbox.Stats{}, now.Add(time.Second))
	if pts := collect(t, reader)[outboxotel.ForwarderBacklogRows]; pts.Data != nil && len(pts.Data.(metricdata.Gauge[int64]).DataPoints) != 0 {
		t.Errorf("a drained lane still reports a backlog: %+v", pts.Data)
	}
}

func keys(m map[string]metricdata.Metrics) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
