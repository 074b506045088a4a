package prometheus

import (
	"strconv"
	"sync"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/forwarder"
)

// Defaults of Config.
const (
	NamespaceDefault = "outbox"
	SubsystemDefault = "forwarder"
)

// Config names the metrics.
type Config struct {
	Namespace string // default NamespaceDefault
	Subsystem string // default SubsystemDefault
	// ConstLabels are added to every metric (for example the service name).
	ConstLabels prom.Labels
}

// Collector holds the metric vectors; Forwarder returns the Metrics of one forwarder.
type Collector struct {
	sent, failed, parked *prom.CounterVec
	inFlight, backlog    *prom.GaugeVec
	oldestAge            *prom.GaugeVec
	parkedRows           *prom.GaugeVec
	lanesHeld            *prom.GaugeVec
}

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
	laneLabels := []string{"forwarder", "lane"}
	c := &Collector{
		sent:       prom.NewCounterVec(prom.CounterOpts(opts("messages_sent_total", "Messages acked by the handler (rows deleted).")), laneLabels),
		failed:     prom.NewCounterVec(prom.CounterOpts(opts("messages_failed_total", "Failed attempts: nacks and rows that cannot be sent.")), laneLabels),
		parked:     prom.NewCounterVec(prom.CounterOpts(opts("messages_parked_total", "Rows parked by this forwarder.")), laneLabels),
		inFlight:   prom.NewGaugeVec(prom.GaugeOpts(opts("messages_in_flight", "Messages handed to the handler and not settled yet.")), laneLabels),
		backlog:    prom.NewGaugeVec(prom.GaugeOpts(opts("backlog_rows", "Eligible rows waiting, per lane (sampled).")), laneLabels),
		oldestAge:  prom.NewGaugeVec(prom.GaugeOpts(opts("oldest_eligible_age_seconds", "Age of the oldest eligible row, per lane (sampled).")), laneLabels),
		parkedRows: prom.NewGaugeVec(prom.GaugeOpts(opts("parked_rows", "Parked rows in the table (sampled).")), []string{"forwarder"}),
		lanesHeld:  prom.NewGaugeVec(prom.GaugeOpts(opts("lanes_held", "Lane leases held by this forwarder.")), []string{"forwarder"}),
	}
	for _, col := range []prom.Collector{c.sent, c.failed, c.parked, c.inFlight, c.backlog, c.oldestAge, c.parkedRows, c.lanesHeld} {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Forwarder returns the forwarder.Metrics of the forwarder labelled name (use its
// HandlerName or table name).
func (c *Collector) Forwarder(name string) forwarder.Metrics {
	return &metrics{c: c, name: name, lanes: map[string]bool{}}
}

type metrics struct {
	c    *Collector
	name string

	mu    sync.Mutex
	lanes map[string]bool // lanes with backlog series, to delete when they drain
}

var _ forwarder.Metrics = (*metrics)(nil)

func laneLabel(lane int) string {
	if lane == outbox.Unordered {
		return "unordered"
	}
	return strconv.Itoa(lane)
}

func (m *metrics) MessageSent(lane int) { m.c.sent.WithLabelValues(m.name, laneLabel(lane)).Inc() }
func (m *metrics) MessageFailed(lane int) {
	m.c.failed.WithLabelValues(m.name, laneLabel(lane)).Inc()
}
func (m *metrics) MessageParked(lane int) {
	m.c.parked.WithLabelValues(m.name, laneLabel(lane)).Inc()
}
func (m *metrics) InFlight(lane int, n int) {
	m.c.inFlight.WithLabelValues(m.name, laneLabel(lane)).Set(float64(n))
}
func (m *metrics) LanesHeld(n int) { m.c.lanesHeld.WithLabelValues(m.name).Set(float64(n)) }

func (m *metrics) Backlog(stats outbox.Stats, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := make(map[string]bool, len(stats.Lanes))
	for _, l := range stats.Lanes {
		lane := laneLabel(l.Lane)
		seen[lane] = true
		m.c.backlog.WithLabelValues(m.name, lane).Set(float64(l.Eligible))
		age := 0.0
		if !l.OldestEligible.IsZero() {
			age = max(now.Sub(l.OldestEligible).Seconds(), 0)
		}
		m.c.oldestAge.WithLabelValues(m.name, lane).Set(age)
	}
	// A drained lane loses its series rather than keeping a stale value.
	for lane := range m.lanes {
		if !seen[lane] {
			m.c.backlog.DeleteLabelValues(m.name, lane)
			m.c.oldestAge.DeleteLabelValues(m.name, lane)
		}
	}
	m.lanes = seen
	m.c.parkedRows.WithLabelValues(m.name).Set(float64(stats.Parked))
}
