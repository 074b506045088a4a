package dashboard

import "time"

// The overview's rate is the pending backlog's trend, measured from samples this
// Handler keeps in memory: each overview (page or JSON refresh) counts the pending rows
// (Store.Count at a far-future instant) and keeps that count with the time it was read,
// at most one sample per sampleSpacing, for Config.RateWindow. The rate is the drop of
// the pending count per minute between the oldest and the newest sample: the rows sent
// (and purged) minus the rows written in that time. It is not the send rate: while
// writers add as fast as forwarders send it is zero. The store keeps no record of sent
// rows (they are deleted), so nothing better can be derived from it; the forwarder's
// metrics (forwarder/prometheus) have the real send rate. No samples are taken while no
// one looks at the overview.
const sampleSpacing = 2 * time.Second

// sample is the pending count at one instant.
type sample struct {
	At      time.Time
	Pending int64
}

// rate is the trend shown on the overview.
type rate struct {
	Valid         bool    `json:"valid"`          // two samples at least 10 s apart
	DrainPerMin   float64 `json:"drain_per_min"`  // pending rows fewer per minute (negative: growing)
	WindowSeconds float64 `json:"window_seconds"` // time between the samples used
	Samples       int     `json:"samples"`
}

// sample records pending at now and returns the trend over the kept samples.
func (h *Handler) sample(now time.Time, pending int64) rate {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := len(h.samples); n == 0 || now.Sub(h.samples[n-1].At) >= sampleSpacing {
		h.samples = append(h.samples, sample{At: now, Pending: pending})
	}
	cut := 0
	for cut < len(h.samples)-1 && now.Sub(h.samples[cut].At) > h.config.RateWindow {
		cut++
	}
	h.samples = append(h.samples[:0], h.samples[cut:]...)
	first, last := h.samples[0], h.samples[len(h.samples)-1]
	span := last.At.Sub(first.At)
	r := rate{Samples: len(h.samples), WindowSeconds: span.Seconds()}
	if span >= 10*time.Second {
		r.Valid = true
		r.DrainPerMin = float64(first.Pending-last.Pending) / span.Minutes()
	}
	return r
}
