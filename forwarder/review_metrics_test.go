package forwarder

import (
	"sync"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

// gaugeSpy records the last InFlight value reported for unordered rows. To reproduce a
// preemption between a goroutine's read of the in-flight counter and its report, the
// report of 1 that follows a report of 2 (the first of two settlements) is held until
// the report of 0 (the second one, from the other claimer) went through, or 1 s passed.
type gaugeSpy struct {
	nopMetrics
	mu       sync.Mutex
	last     int
	prev     int
	sawZero  chan struct{}
	zeroOnce sync.Once
	held     bool
	active   int // reports in progress
	zeros    int // reports of 0 done
}

func (s *gaugeSpy) InFlight(lane, n int) {
	if lane != outbox.Unordered {
		return
	}
	s.mu.Lock()
	s.active++
	hold := n == 1 && s.prev == 2 && !s.held
	if hold {
		s.held = true
	}
	s.prev = n
	s.mu.Unlock()
	if hold {
		select {
		case <-s.sawZero:
		case <-time.After(time.Second):
		}
	}
	s.mu.Lock()
	s.last = n
	s.active--
	if n == 0 {
		s.zeros++
	}
	s.mu.Unlock()
	if n == 0 {
		s.zeroOnce.Do(func() { close(s.sawZero) })
	}
}

func (s *gaugeSpy) value() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// R5: gauges are reported as "read the shared counter, then Set" from several goroutines
// (two unordered claimers; the lane workers and the lease manager for LanesHeld) without
// ordering between them, so a report computed earlier can land last: the gauge then
// shows a stale value until the next change -- e.g. one message in flight forever on an
// idle forwarder, or the lanes held before a handover.
func TestReviewInFlightGaugeEndsAtZero(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		tb.insert(t, tb.row("t", "", "a"), tb.row("t", "", "b"))
		rec := newRecorder()
		gate := make(chan struct{})
		rec.gate = gate
		spy := &gaugeSpy{sawZero: make(chan struct{})}
		cfg := fastConfig()
		cfg.DisableOrdered = true
		cfg.Claimers = 2
		cfg.InFlight = 2 // one row per claimer
		cfg.ClaimBatch = 1
		cfg.Metrics = spy
		f, _ := start(t, tb.store, Targets{"": rec}, cfg)
		waitFor(t, 20*time.Second, "both rows in flight (one per claimer)", func() bool { return f.Stats().Unordered.InFlight == 2 })
		rec.mu.Lock()
		rec.gate = nil
		rec.mu.Unlock()
		close(gate)
		waitFor(t, 20*time.Second, "rows deleted", func() bool { return tb.rows(t) == 0 })
		waitFor(t, 20*time.Second, "counter at zero", func() bool { return f.Stats().Unordered.InFlight == 0 })
		// Every report went through (the held one waits at most 1 s).
		waitFor(t, 20*time.Second, "reports settled", func() bool {
			spy.mu.Lock()
			defer spy.mu.Unlock()
			return spy.active == 0 && spy.zeros > 0
		})
		if v := spy.value(); v != 0 {
			t.Fatalf("R5: in-flight gauge left at %d on an idle forwarder (Stats says 0): a stale report landed last", v)
		}
	})
}
