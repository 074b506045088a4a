package prometheus_test

import (
	"testing"

	prom "github.com/prometheus/client_golang/prometheus"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/inbox/prometheus"
)

// gather returns "name{label=value}" -> value of every series in reg.
func gather(t *testing.T, reg *prom.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "{" + l.GetName() + "=" + l.GetValue() + "}"
			}
			switch {
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[key] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

func TestCollector(t *testing.T) {
	reg := prom.NewRegistry()
	c, err := prometheus.New(reg, prometheus.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c.Recorded("billing")
	c.Duplicate("billing")
	c.Duplicate("billing")
	c.Pruned(5)
	c.Entries(outbox.InboxStats{Consumers: []outbox.InboxConsumerStats{{Consumer: "billing", Entries: 7}, {Consumer: "old", Entries: 1, Duplicates: 4}}})
	c.Entries(outbox.InboxStats{Consumers: []outbox.InboxConsumerStats{{Consumer: "billing", Entries: 8, Duplicates: 3}}})
	got := gather(t, reg)
	want := map[string]float64{
		"outbox_inbox_recorded_total{consumer=billing}":    1,
		"outbox_inbox_duplicates_total{consumer=billing}":  2,
		"outbox_inbox_pruned_total":                        5,
		"outbox_inbox_entries{consumer=billing}":           8,
		"outbox_inbox_stored_duplicates{consumer=billing}": 3,
	}
	if len(got) != len(want) {
		t.Fatalf("series %v; want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v; want %v", k, got[k], v)
		}
	}
	if _, err := prometheus.New(reg, prometheus.Config{}); err == nil {
		t.Fatal("registering twice: no error")
	}
}
