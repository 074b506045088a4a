package otel

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/metric"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/inbox"
)

// Instrument names of the inbox's metrics; OpenTelemetry's Prometheus exporter turns
// them into the names package inbox/prometheus registers (outbox.inbox.recorded is
// outbox_inbox_recorded_total).
const (
	InboxRecorded         = "outbox.inbox.recorded"          // counter, {message}, by consumer
	InboxDuplicates       = "outbox.inbox.duplicates"        // counter, {message}, by consumer
	InboxPruned           = "outbox.inbox.pruned"            // counter, {entry}
	InboxEntries          = "outbox.inbox.entries"           // gauge, {entry}, by consumer (sampled by the cleaner)
	InboxStoredDuplicates = "outbox.inbox.stored_duplicates" // gauge, {message}, by consumer (sampled by the cleaner)
)

// InboxMetrics is an inbox.Metrics over OpenTelemetry instruments, the twin of
// inbox/prometheus's Collector; one serves any number of Inboxes and Cleaners of one
// table.
type InboxMetrics struct {
	recorded, duplicates, pruned metric.Int64Counter
	reg                          metric.Registration

	mu    sync.Mutex
	stats outbox.InboxStats
}

var _ inbox.Metrics = (*InboxMetrics)(nil)

// NewInboxMetrics creates the instruments on cfg's meter.
func NewInboxMetrics(cfg MetricsConfig) (*InboxMetrics, error) {
	m := cfg.meter()
	c := &InboxMetrics{}
	var err error
	if c.recorded, err = m.Int64Counter(InboxRecorded, metric.WithUnit("{message}"), metric.WithDescription("Messages recorded in the inbox (their handler ran).")); err != nil {
		return nil, err
	}
	if c.duplicates, err = m.Int64Counter(InboxDuplicates, metric.WithUnit("{message}"), metric.WithDescription("Messages acked without running the handler: already applied.")); err != nil {
		return nil, err
	}
	if c.pruned, err = m.Int64Counter(InboxPruned, metric.WithUnit("{entry}"), metric.WithDescription("Entries deleted by retention.")); err != nil {
		return nil, err
	}
	entries, err := m.Int64ObservableGauge(InboxEntries, metric.WithUnit("{entry}"), metric.WithDescription("Entries in the inbox table (sampled by the cleaner)."))
	if err != nil {
		return nil, err
	}
	dups, err := m.Int64ObservableGauge(InboxStoredDuplicates, metric.WithUnit("{message}"), metric.WithDescription("Duplicates skipped, as counted on the inbox table's entries by every process (sampled by the cleaner)."))
	if err != nil {
		return nil, err
	}
	c.reg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, s := range c.stats.Consumers {
			set := metric.WithAttributes(AttrConsumer.String(s.Consumer))
			o.ObserveInt64(entries, s.Entries, set)
			o.ObserveInt64(dups, s.Duplicates, set)
		}
		return nil
	}, entries, dups)
	return c, err
}

// Unregister stops observing the gauges.
func (c *InboxMetrics) Unregister() error { return c.reg.Unregister() }

// Recorded implements inbox.Metrics.
func (c *InboxMetrics) Recorded(consumer string) {
	c.recorded.Add(context.Background(), 1, metric.WithAttributes(AttrConsumer.String(consumer)))
}

// Duplicate implements inbox.Metrics.
func (c *InboxMetrics) Duplicate(consumer string) {
	c.duplicates.Add(context.Background(), 1, metric.WithAttributes(AttrConsumer.String(consumer)))
}

// Pruned implements inbox.Metrics.
func (c *InboxMetrics) Pruned(n int) { c.pruned.Add(context.Background(), int64(n)) }

// Entries implements inbox.Metrics: the gauges report this sample until the next one; a
// consumer missing from it loses its series.
func (c *InboxMetrics) Entries(st outbox.InboxStats) {
	c.mu.Lock()
	c.stats = st
	c.mu.Unlock()
}
