// Package prometheus exposes inbox metrics through the Prometheus client library, like
// forwarder/prometheus does for the forwarder:
//
//	c, err := prometheus.New(registry, prometheus.Config{})
//	in, err := inbox.New(store, inbox.Config{Metrics: c}, logger)
//	cleaner, err := inbox.NewCleaner(store, inbox.CleanerConfig{Metrics: c}, logger)
//
// Metrics (namespace "outbox", subsystem "inbox" by default): recorded_total and
// duplicates_total (counters of this process, by consumer), pruned_total (counter),
// entries and stored_duplicates (gauges by consumer, sampled from the table by the
// cleaner after each round: the entries kept and the duplicates they skipped, over
// every process).
package prometheus

import (
	"sync"

	prom "github.com/prometheus/client_golang/prometheus"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/inbox"
)

// Defaults of Config.
const (
	NamespaceDefault = "outbox"
	SubsystemDefault = "inbox"
)

// Config names the metrics.
type Config struct {
	Namespace string // Defaults to NamespaceDefault.
	Subsystem string // Defaults to SubsystemDefault.
	// ConstLabels are added to every metric (for example the service name).
	ConstLabels prom.Labels
}

// Collector is an inbox.Metrics over Prometheus vectors; one serves any number of
// Inboxes and Cleaners of one table.
type Collector struct {
	recorded, duplicates *prom.CounterVec
	pruned               prom.Counter
	entries, storedDups  *prom.GaugeVec

	mu        sync.Mutex
	consumers map[string]bool // consumers with an entries series
}

var _ inbox.Metrics = (*Collector)(nil)

// New creates the metrics and registers them with reg (prometheus.DefaultRegisterer
// when nil).
func New(reg prom.Registerer, cfg Config) (*Collector, error) {
	if reg == nil {
		reg = prom.DefaultRegisterer
	}
	if cfg.Namespace == "" {
		cfg.Namespace = NamespaceDefault
	}
	if cfg.Subsystem == "" {
		cfg.Subsystem = SubsystemDefault
	}
	opts := func(name, help string) prom.Opts {
		return prom.Opts{Namespace: cfg.Namespace, Subsystem: cfg.Subsystem, Name: name, Help: help, ConstLabels: cfg.ConstLabels}
	}
	c := &Collector{
		recorded:   prom.NewCounterVec(prom.CounterOpts(opts("recorded_total", "Messages recorded in the inbox (their handler ran).")), []string{"consumer"}),
		duplicates: prom.NewCounterVec(prom.CounterOpts(opts("duplicates_total", "Messages acked without running the handler: already applied.")), []string{"consumer"}),
		pruned:     prom.NewCounter(prom.CounterOpts(opts("pruned_total", "Entries deleted by retention."))),
		entries:    prom.NewGaugeVec(prom.GaugeOpts(opts("entries", "Entries in the inbox table (sampled by the cleaner).")), []string{"consumer"}),
		storedDups: prom.NewGaugeVec(prom.GaugeOpts(opts("stored_duplicates", "Duplicates skipped, as counted on the inbox table's entries by every process (sampled by the cleaner).")), []string{"consumer"}),
		consumers:  map[string]bool{},
	}
	for _, col := range []prom.Collector{c.recorded, c.duplicates, c.pruned, c.entries, c.storedDups} {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *Collector) Recorded(consumer string)  { c.recorded.WithLabelValues(consumer).Inc() }
func (c *Collector) Duplicate(consumer string) { c.duplicates.WithLabelValues(consumer).Inc() }
func (c *Collector) Pruned(n int)              { c.pruned.Add(float64(n)) }

// Entries sets the entries and stored_duplicates gauges per consumer; a consumer gone
// from the table loses its series.
func (c *Collector) Entries(st outbox.InboxStats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := make(map[string]bool, len(st.Consumers))
	for _, s := range st.Consumers {
		seen[s.Consumer] = true
		c.entries.WithLabelValues(s.Consumer).Set(float64(s.Entries))
		c.storedDups.WithLabelValues(s.Consumer).Set(float64(s.Duplicates))
	}
	for consumer := range c.consumers {
		if !seen[consumer] {
			c.entries.DeleteLabelValues(consumer)
			c.storedDups.DeleteLabelValues(consumer)
		}
	}
	c.consumers = seen
}
