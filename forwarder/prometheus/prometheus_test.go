package prometheus_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/forwarder/prometheus"
)

// dump renders the gathered metrics as sorted "name{labels} value" lines.
func dump(t *testing.T, reg *prom.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			v := m.GetGauge().GetValue()
			if m.Counter != nil {
				v = m.GetCounter().GetValue()
			}
			lines = append(lines, fmt.Sprintf("%s{%s} %g", mf.GetName(), strings.Join(labels, ","), v))
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func TestCollector(t *testing.T) {
	reg := prom.NewRegistry()
	c, err := prometheus.New(reg, prometheus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	a, b := c.Forwarder("orders"), c.Forwarder("billing")
	a.MessageSent(outbox.Unordered)
	a.MessageSent(outbox.Unordered)
	a.MessageSent(3)
	a.MessageFailed(3)
	a.MessageParked(3)
	a.InFlight(outbox.Unordered, 7)
	a.LanesHeld(4)
	b.MessageSent(0)
	now := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	a.Backlog(outbox.Stats{Lanes: []outbox.LaneStats{
		{Lane: outbox.Unordered, Eligible: 5, OldestEligible: now.Add(-4 * time.Second)},
		{Lane: 2, Eligible: 1, OldestEligible: now.Add(-time.Second)},
	}, Parked: 2}, now)
	// Lane 2 drains: its backlog series go away.
	a.Backlog(outbox.Stats{Lanes: []outbox.LaneStats{{Lane: outbox.Unordered, Eligible: 1, OldestEligible: now}}}, now)

	want := strings.Join([]string{
		"outbox_forwarder_backlog_rows{forwarder=orders,lane=unordered} 1",
		"outbox_forwarder_lanes_held{forwarder=orders} 4",
		"outbox_forwarder_messages_failed_total{forwarder=orders,lane=3} 1",
		"outbox_forwarder_messages_in_flight{forwarder=orders,lane=unordered} 7",
		"outbox_forwarder_messages_parked_total{forwarder=orders,lane=3} 1",
		"outbox_forwarder_messages_sent_total{forwarder=billing,lane=0} 1",
		"outbox_forwarder_messages_sent_total{forwarder=orders,lane=3} 1",
		"outbox_forwarder_messages_sent_total{forwarder=orders,lane=unordered} 2",
		"outbox_forwarder_oldest_eligible_age_seconds{forwarder=orders,lane=unordered} 0",
		"outbox_forwarder_parked_rows{forwarder=orders} 0",
	}, "\n")
	if got := dump(t, reg); got != want {
		t.Fatalf("metrics:\n%s\nwant:\n%s", got, want)
	}
	if _, err := prometheus.New(reg, prometheus.Config{}); err == nil {
		t.Fatal("registering the same metrics twice succeeded")
	}
}
