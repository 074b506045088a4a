package forwarder

import (
	"context"
	"errors"
	"fmt"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

// Metrics receives the forwarder's counters and gauges. lane is outbox.Unordered for
// unordered rows. Methods are called from the forwarder's goroutines and must not
// block; InFlight and LanesHeld calls are serialized, so the last value a gauge receives
// is the current one. Package forwarder/prometheus implements it.
type Metrics interface {
	// MessageSent counts a message acked by the handler (its row is then deleted).
	MessageSent(lane int)
	// MessageFailed counts a failed attempt (nack, or a row that cannot be sent) once the
	// store has recorded it (a failure the store no longer accepts, its claim or lease
	// gone, or a locked batch that rolled back, is not counted: the row is tried again).
	MessageFailed(lane int)
	// MessageParked counts a row parked by this forwarder.
	MessageParked(lane int)
	// InFlight reports the messages of lane handed to the handler and not yet settled.
	InFlight(lane int, n int)
	// LanesHeld reports how many lane leases this forwarder holds.
	LanesHeld(n int)
	// Backlog reports a sample of the table's backlog (store.Stats) taken at now: per
	// lane with eligible rows its count and oldest DeliverAt, and the parked total.
	// Lanes missing from stats have no eligible rows.
	Backlog(stats outbox.Stats, now time.Time)
}

type nopMetrics struct{}

func (nopMetrics) MessageSent(int)                 {}
func (nopMetrics) MessageFailed(int)               {}
func (nopMetrics) MessageParked(int)               {}
func (nopMetrics) InFlight(int, int)               {}
func (nopMetrics) LanesHeld(int)                   {}
func (nopMetrics) Backlog(outbox.Stats, time.Time) {}

// reportInFlight reports lane's in-flight gauge. Reading the counter and reporting it
// under one lock keeps the reports in order: concurrent settlements cannot leave an
// older value as the last one the gauge received.
func (f *Forwarder) reportInFlight(lane int) {
	f.gaugeMu.Lock()
	defer f.gaugeMu.Unlock()
	f.metrics.InFlight(lane, int(f.counters[lane+1].inFlight.Load()))
}

// reportLanesHeld reports the held-lanes gauge (ordered like reportInFlight).
func (f *Forwarder) reportLanesHeld() {
	f.gaugeMu.Lock()
	defer f.gaugeMu.Unlock()
	f.metrics.LanesHeld(f.heldCount())
}

// LaneSnapshot is the state of one lane (or of unordered rows, Lane == outbox.Unordered).
type LaneSnapshot struct {
	Lane int
	// Held reports whether this forwarder holds the lane's lease (always true for
	// unordered rows unless disabled).
	Held bool
	// Backlog and OldestEligible come from the last sample of the table's stats.
	Backlog        int64
	OldestEligible time.Time
	InFlight       int64
	Sent           uint64
	Failed         uint64
	Parked         uint64
}

// Snapshot is what Stats returns.
type Snapshot struct {
	Owner     string
	Members   int // live forwarders of the table at the last lease round
	HeldLanes []int
	Unordered LaneSnapshot
	// Lanes lists the lanes that are held here or have a backlog or activity.
	Lanes []LaneSnapshot
	// Parked is the table's parked row count at the last sample.
	Parked    int64
	SampledAt time.Time // zero before the first sample
}

// Stats returns counters since start and the last backlog sample.
func (f *Forwarder) Stats() Snapshot {
	f.statsMu.Lock()
	st, at := f.stats, f.statsAt
	f.statsMu.Unlock()
	backlog := map[int]outbox.LaneStats{}
	for _, l := range st.Lanes {
		backlog[l.Lane] = l
	}
	snap := Snapshot{Owner: f.cfg.Owner, Members: int(f.members.Load()), Parked: st.Parked, SampledAt: at}
	lane := func(lane int) LaneSnapshot {
		c := &f.counters[lane+1]
		b := backlog[lane]
		s := LaneSnapshot{
			Lane: lane, Backlog: b.Eligible, OldestEligible: b.OldestEligible,
			InFlight: c.inFlight.Load(), Sent: c.sent.Load(), Failed: c.failed.Load(), Parked: c.parked.Load(),
		}
		if lane == outbox.Unordered {
			s.Held = !f.cfg.DisableUnordered
		} else {
			s.Held = f.held[lane].Load()
		}
		return s
	}
	snap.Unordered = lane(outbox.Unordered)
	for i := 0; i < f.opts.Lanes; i++ {
		s := lane(i)
		if s.Held {
			snap.HeldLanes = append(snap.HeldLanes, i)
		}
		if s.Held || s.Backlog > 0 || s.InFlight > 0 || s.Sent > 0 || s.Failed > 0 {
			snap.Lanes = append(snap.Lanes, s)
		}
	}
	return snap
}

// Health reads the table's backlog now and fails, wrapping outbox.ErrUnhealthy, when the
// oldest eligible row of any lane, or of unordered rows, has waited longer than maxAge.
// It also fails when the forwarder is closed (outbox.ErrClosed), when the database cannot
// be read, and, wrapping outbox.ErrLaneOutOfRange, when rows sit in lanes this forwarder's
// lane count cannot own (a writer with another Lanes setting started after the
// forwarder's startup check: those rows would never be sent).
func (f *Forwarder) Health(ctx context.Context, maxAge time.Duration) error {
	f.mu.Lock()
	closed := f.closed
	f.mu.Unlock()
	if closed {
		return outbox.ErrClosed
	}
	now := f.now()
	st, err := f.store.Stats(ctx, now)
	if err != nil {
		return fmt.Errorf("forwarder: health: read backlog: %w", err)
	}
	f.setStats(st, now)
	var errs []error
	if err := f.lanesOutOfRange(st); err != nil {
		errs = append(errs, err)
	}
	for _, l := range st.Lanes {
		if l.OldestEligible.IsZero() {
			continue
		}
		if age := now.Sub(l.OldestEligible); age > maxAge {
			name := fmt.Sprintf("lane %d", l.Lane)
			if l.Lane == outbox.Unordered {
				name = "unordered rows"
			}
			errs = append(errs, fmt.Errorf("%w: %s: oldest eligible row waits %s (> %s), %d eligible",
				outbox.ErrUnhealthy, name, age.Round(time.Millisecond), maxAge, l.Eligible))
		}
	}
	return errors.Join(errs...)
}

// lanesOutOfRange reports eligible rows in lanes >= Lanes, which no forwarder with this
// configuration ever claims.
func (f *Forwarder) lanesOutOfRange(st outbox.Stats) error {
	for _, l := range st.Lanes {
		if l.Lane >= f.opts.Lanes && l.Eligible > 0 {
			return fmt.Errorf("%w: table %s holds %d eligible rows in lane %d but the forwarder has %d lanes (writers and forwarders must use equal Lanes)",
				outbox.ErrLaneOutOfRange, f.opts.OutboxTable(), l.Eligible, l.Lane, f.opts.Lanes)
		}
	}
	return nil
}

func (f *Forwarder) setStats(st outbox.Stats, now time.Time) {
	f.statsMu.Lock()
	f.stats, f.statsAt = st, now
	f.statsMu.Unlock()
	f.metrics.Backlog(st, now)
}
