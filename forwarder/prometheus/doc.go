// Package prometheus exposes forwarder metrics through the Prometheus client library.
//
// github.com/prometheus/client_golang is the de-facto standard Go instrumentation
// library, maintained by the Prometheus project, and the one Watermill's own metrics
// component (components/metrics) is built on, so a Watermill router's handler metrics and
// the forwarder's land in the same registry. The forwarder itself depends only on its
// small Metrics interface; an OpenTelemetry adapter would be another implementation of
// it.
//
// One Collector serves any number of forwarders (outbox tables); each gets its own
// label value:
//
//	c, err := prometheus.New(registry, prometheus.Config{})
//	cfg := forwarder.Config{HandlerName: "orders_outbox", Metrics: c.Forwarder("orders_outbox")}
//
// Metrics (namespace "outbox", subsystem "forwarder" by default), labelled by forwarder
// and lane ("unordered" or the lane number):
//
//	messages_sent_total, messages_failed_total, messages_parked_total   counters
//	messages_in_flight                                                  gauge
//	backlog_rows, oldest_eligible_age_seconds                           gauges, sampled
//
// and, labelled by forwarder only, parked_rows (the table's parked rows, sampled) and
// lanes_held.
//
// It is a module of its own, so that the library does not require the Prometheus
// client: go get github.com/relayer-go/watermill-outbox/forwarder/prometheus.
package prometheus
