package otel

import (
	"context"
	"strconv"
	"sync"
	"time"

	gotel "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/forwarder"
)

// Instrument names of the forwarder's metrics. OpenTelemetry's Prometheus exporter
// turns each into the name package forwarder/prometheus registers ("." becomes "_", a
// counter gains "_total", unit "s" gains "_seconds"): outbox.forwarder.messages_sent
// is outbox_forwarder_messages_sent_total, outbox.forwarder.oldest_eligible_age is
// outbox_forwarder_oldest_eligible_age_seconds.
const (
	ForwarderMessagesSent      = "outbox.forwarder.messages_sent"       // counter, {message}, by forwarder and lane
	ForwarderMessagesFailed    = "outbox.forwarder.messages_failed"     // counter, {message}, by forwarder and lane
	ForwarderMessagesParked    = "outbox.forwarder.messages_parked"     // counter, {message}, by forwarder and lane
	ForwarderMessagesInFlight  = "outbox.forwarder.messages_in_flight"  // gauge, {message}, by forwarder and lane
	ForwarderBacklogRows       = "outbox.forwarder.backlog_rows"        // gauge, {row}, by forwarder and lane (sampled)
	ForwarderOldestEligibleAge = "outbox.forwarder.oldest_eligible_age" // gauge, s, by forwarder and lane (sampled)
	ForwarderParkedRows        = "outbox.forwarder.parked_rows"         // gauge, {row}, by forwarder (sampled)
	ForwarderLanesHeld         = "outbox.forwarder.lanes_held"          // gauge, {lane}, by forwarder
)

// Attribute keys of the metrics, the Prometheus adapters' label names.
const (
	AttrForwarder = attribute.Key("forwarder")
	AttrLaneLabel = attribute.Key("lane") // "unordered" or the lane number
	AttrConsumer  = attribute.Key("consumer")
)

// MetricsConfig configures NewForwarderMetrics and NewInboxMetrics.
type MetricsConfig struct {
	// MeterProvider makes the instruments. Defaults to the global provider
	// (otel.GetMeterProvider()).
	MeterProvider metric.MeterProvider
}

func (c *MetricsConfig) meter() metric.Meter {
	if c.MeterProvider == nil {
		c.MeterProvider = gotel.GetMeterProvider()
	}
	return c.MeterProvider.Meter(InstrumentationName)
}

// ForwarderMetrics holds the forwarder instruments; Forwarder returns the
// forwarder.Metrics of one forwarder. It is the OpenTelemetry twin of
// forwarder/prometheus's Collector: same metrics, same labels, same units.
type ForwarderMetrics struct {
	sent, failed, parked metric.Int64Counter
	reg                  metric.Registration

	mu         sync.Mutex
	forwarders map[string]*fwdMetrics
}

// NewForwarderMetrics creates the instruments on cfg's meter.
func NewForwarderMetrics(cfg MetricsConfig) (*ForwarderMetrics, error) {
	m := cfg.meter()
	c := &ForwarderMetrics{forwarders: map[string]*fwdMetrics{}}
	var err error
	if c.sent, err = m.Int64Counter(ForwarderMessagesSent, metric.WithUnit("{message}"), metric.WithDescription("Messages acked by the handler (rows deleted).")); err != nil {
		return nil, err
	}
	if c.failed, err = m.Int64Counter(ForwarderMessagesFailed, metric.WithUnit("{message}"), metric.WithDescription("Failed attempts: nacks and rows that cannot be sent.")); err != nil {
		return nil, err
	}
	if c.parked, err = m.Int64Counter(ForwarderMessagesParked, metric.WithUnit("{message}"), metric.WithDescription("Rows parked by this forwarder.")); err != nil {
		return nil, err
	}
	return c, c.observeGauges(m)
}

// observeGauges registers the gauges, observed from each forwarder's last report: a
// lane that drained is not observed any more, so its series ends (as the Prometheus
// adapter deletes it).
func (c *ForwarderMetrics) observeGauges(m metric.Meter) error {
	inFlight, err1 := m.Int64ObservableGauge(ForwarderMessagesInFlight, metric.WithUnit("{message}"), metric.WithDescription("Messages handed to the handler and not settled yet."))
	backlog, err2 := m.Int64ObservableGauge(ForwarderBacklogRows, metric.WithUnit("{row}"), metric.WithDescription("Eligible rows waiting, per lane (sampled)."))
	age, err3 := m.Float64ObservableGauge(ForwarderOldestEligibleAge, metric.WithUnit("s"), metric.WithDescription("Age of the oldest eligible row, per lane (sampled)."))
	parked, err4 := m.Int64ObservableGauge(ForwarderParkedRows, metric.WithUnit("{row}"), metric.WithDescription("Parked rows in the table (sampled)."))
	held, err5 := m.Int64ObservableGauge(ForwarderLanesHeld, metric.WithUnit("{lane}"), metric.WithDescription("Lane leases held by this forwarder."))
	for _, err := range []error{err1, err2, err3, err4, err5} {
		if err != nil {
			return err
		}
	}
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, f := range c.forwarders {
			f.observe(o, inFlight, backlog, age, parked, held)
		}
		return nil
	}, inFlight, backlog, age, parked, held)
	c.reg = reg
	return err
}

// Unregister stops observing the gauges (the counters stay with the meter).
func (c *ForwarderMetrics) Unregister() error { return c.reg.Unregister() }

// Forwarder returns the forwarder.Metrics of the forwarder labelled name (use its
// HandlerName or table name).
func (c *ForwarderMetrics) Forwarder(name string) forwarder.Metrics {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.forwarders[name]
	if !ok {
		f = &fwdMetrics{c: c, name: name, attr: AttrForwarder.String(name), inFlight: map[int]int{}}
		c.forwarders[name] = f
	}
	return f
}

// fwdMetrics is one forwarder's state; its gauge values are guarded by c.mu.
type fwdMetrics struct {
	c    *ForwarderMetrics
	name string
	attr attribute.KeyValue

	inFlight map[int]int
	held     int
	stats    outbox.Stats
	sampled  time.Time
}

var _ forwarder.Metrics = (*fwdMetrics)(nil)

func laneLabel(lane int) string {
	if lane == outbox.Unordered {
		return "unordered"
	}
	return strconv.Itoa(lane)
}

func (f *fwdMetrics) laneSet(lane int) metric.MeasurementOption {
	return metric.WithAttributes(f.attr, AttrLaneLabel.String(laneLabel(lane)))
}

func (f *fwdMetrics) MessageSent(lane int) {
	f.c.sent.Add(context.Background(), 1, f.laneSet(lane))
}

func (f *fwdMetrics) MessageFailed(lane int) {
	f.c.failed.Add(context.Background(), 1, f.laneSet(lane))
}

func (f *fwdMetrics) MessageParked(lane int) {
	f.c.parked.Add(context.Background(), 1, f.laneSet(lane))
}

func (f *fwdMetrics) InFlight(lane int, n int) {
	f.c.mu.Lock()
	f.inFlight[lane] = n
	f.c.mu.Unlock()
}

func (f *fwdMetrics) LanesHeld(n int) {
	f.c.mu.Lock()
	f.held = n
	f.c.mu.Unlock()
}

func (f *fwdMetrics) Backlog(stats outbox.Stats, now time.Time) {
	f.c.mu.Lock()
	f.stats, f.sampled = stats, now
	f.c.mu.Unlock()
}

// observe reports f's gauges; the caller holds c.mu.
func (f *fwdMetrics) observe(o metric.Observer, inFlight, backlog metric.Int64Observable, age metric.Float64Observable, parked, held metric.Int64Observable) {
	for lane, n := range f.inFlight {
		o.ObserveInt64(inFlight, int64(n), f.laneSet(lane))
	}
	for _, l := range f.stats.Lanes {
		o.ObserveInt64(backlog, l.Eligible, f.laneSet(l.Lane))
		a := 0.0
		if !l.OldestEligible.IsZero() {
			a = max(f.sampled.Sub(l.OldestEligible).Seconds(), 0)
		}
		o.ObserveFloat64(age, a, f.laneSet(l.Lane))
	}
	if !f.sampled.IsZero() {
		o.ObserveInt64(parked, f.stats.Parked, metric.WithAttributes(f.attr))
	}
	o.ObserveInt64(held, int64(f.held), metric.WithAttributes(f.attr))
}
