package forwarder

import (
	"context"
	"time"
)

// sampler samples the table's backlog (store.Stats) every StatsInterval for Stats and
// Metrics. The first sample is taken one interval after the start: counting a large
// backlog is a scan, and at startup the database has better things to do (draining that
// backlog); Health reads the backlog itself.
type sampler struct {
	f        *Forwarder
	interval time.Duration
}

func newSampler(f *Forwarder) *sampler {
	return &sampler{f: f, interval: f.cfg.StatsInterval}
}

// run samples until Close starts.
func (s *sampler) run() {
	for sleep(s.interval, s.f.stopping, nil) {
		s.sample()
	}
}

// sample reads the backlog once, records it, and logs rows in lanes this forwarder
// cannot own.
func (s *sampler) sample() {
	f := s.f
	ctx, cancel := context.WithTimeout(context.Background(), max(s.interval, time.Second))
	defer cancel()
	now := f.now()
	st, err := f.store.Stats(ctx, now)
	if err != nil {
		f.logger.Error("Cannot sample the outbox backlog", err, nil)
		return
	}
	f.setStats(st, now)
	if err := f.lanesOutOfRange(st); err != nil {
		f.logger.Error("Rows in lanes this forwarder cannot own are not sent", err, nil)
	}
}
