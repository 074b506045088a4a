package forwarder

import (
	"context"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

// runLaneScout looks for the lanes holding pending rows (Store.PendingLanes: an index
// dive per non-empty lane) and wakes the worker of a lane that has just received rows.
// It looks every PollInterval after a lane received rows, backing off to MaxPollInterval
// while nothing changes (workers of non-empty lanes poll those themselves). Idle workers
// of empty lanes do not poll at all: with 64 empty lanes an idle forwarder sends one
// probe per MaxPollInterval instead of 64 claims. When the probe fails every worker polls
// its lane on its own again.
func (f *Forwarder) runLaneScout() {
	defer f.services.Done()
	cfg := &f.cfg
	interval := cfg.PollInterval
	pending := make([]bool, len(f.lanePending))
	for {
		ctx, cancel := context.WithTimeout(f.hardCtx, cfg.LeaseTTL)
		lanes, err := f.store.PendingLanes(ctx)
		cancel()
		if err != nil {
			if f.hardCtx.Err() != nil {
				return
			}
			f.logger.Error("Cannot look for lanes with pending rows; every lane worker polls its lane", err, nil)
			for i := range f.lanePending {
				if !f.lanePending[i].Swap(true) && f.held[i].Load() {
					wake(f.laneWake[i])
				}
			}
			interval = cfg.PollInterval
		} else {
			clear(pending)
			for _, l := range lanes {
				if l >= 0 && l < len(pending) {
					pending[l] = true
				}
			}
			arrived := false
			for l, p := range pending {
				if was := f.lanePending[l].Swap(p); p && !was {
					arrived = true
					if f.held[l].Load() {
						wake(f.laneWake[l])
					}
				}
			}
			if arrived {
				interval = cfg.PollInterval
			} else {
				interval = min(2*interval, cfg.MaxPollInterval)
			}
		}
		if !sleep(interval, f.stopping, nil) {
			return
		}
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
