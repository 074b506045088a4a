package forwarder

import (
	"context"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

// laneScout is the service that looks for the lanes holding pending rows
// (Store.PendingLanes: a few index dives) and wakes the worker of a lane
// that has just received rows. It looks every PollInterval after a lane received rows,
// backing off to MaxPollInterval while nothing changes (workers of non-empty lanes poll
// those themselves). Idle workers of empty lanes do not poll at all: with 64 empty lanes
// an idle forwarder sends one probe per MaxPollInterval instead of 64 head reads. When
// the probe fails every worker polls its lane on its own again.
type laneScout struct {
	f        *Forwarder
	interval time.Duration // until the next look
	pending  []bool        // the last look's answer, by lane
}

func newLaneScout(f *Forwarder) *laneScout {
	return &laneScout{f: f, interval: f.cfg.PollInterval, pending: make([]bool, len(f.lanePending))}
}

// run looks, then sleeps the interval, until Close.
func (s *laneScout) run() {
	f := s.f
	defer f.services.Done()
	for {
		ctx, cancel := context.WithTimeout(f.hardCtx, f.cfg.LeaseTTL)
		lanes, err := f.store.PendingLanes(ctx)
		cancel()
		switch {
		case err != nil && f.hardCtx.Err() != nil:
			return
		case err != nil:
			f.logger.Error("Cannot look for lanes with pending rows; every lane worker polls its lane", err, nil)
			s.wakeAll()
		default:
			s.update(lanes)
		}
		if !sleep(s.interval, f.stopping, nil) {
			return
		}
	}
}

// wakeAll marks every lane pending, so that every worker polls its lane.
func (s *laneScout) wakeAll() {
	f := s.f
	for i := range f.lanePending {
		if !f.lanePending[i].Swap(true) && f.held[i].Load() {
			wake(f.laneWake[i])
		}
	}
	s.interval = f.cfg.PollInterval
}

// update records the lanes found pending and wakes the workers of those that just
// received rows.
func (s *laneScout) update(lanes []int) {
	f := s.f
	clear(s.pending)
	for _, l := range lanes {
		if l >= 0 && l < len(s.pending) {
			s.pending[l] = true
		}
	}
	arrived := false
	for l, p := range s.pending {
		if was := f.lanePending[l].Swap(p); p && !was {
			arrived = true
			if f.held[l].Load() {
				wake(f.laneWake[l])
			}
		}
	}
	if arrived {
		s.interval = f.cfg.PollInterval
	} else {
		s.interval = min(2*s.interval, f.cfg.MaxPollInterval)
	}
}

// refreshParkedLanes finds the lanes that hold parked rows (StopLaneOnPoison). A lane a
// worker stopped after the listing began stays stopped.
func (f *Forwarder) refreshParkedLanes(ctx context.Context) {
	started := time.Now()
	found := map[int]bool{}
	var after outbox.ID
	for {
		recs, err := f.store.ListParked(ctx, outbox.ParkedQuery{After: after, Limit: 500})
		if err != nil {
			f.logger.Error("Cannot list parked rows", err, nil)
			return
		}
		for i := range recs {
			if recs[i].Lane != outbox.Unordered {
				found[recs[i].Lane] = true
			}
		}
		if len(recs) < 500 {
			break
		}
		after = recs[len(recs)-1].ID
	}
	f.statsMu.Lock()
	defer f.statsMu.Unlock()
	for lane, mark := range f.parkedLanes {
		if !found[lane] && mark.Before(started) {
			delete(f.parkedLanes, lane)
		}
	}
	for lane := range found {
		if _, ok := f.parkedLanes[lane]; !ok {
			f.parkedLanes[lane] = started
		}
	}
}

func (f *Forwarder) laneStopped(lane int) bool {
	f.statsMu.Lock()
	defer f.statsMu.Unlock()
	_, ok := f.parkedLanes[lane]
	return ok
}

func (f *Forwarder) stopLane(lane int) {
	f.statsMu.Lock()
	defer f.statsMu.Unlock()
	f.parkedLanes[lane] = time.Now()
}
