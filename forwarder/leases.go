package forwarder

import (
	"context"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	outbox "github.com/relayer-go/watermill-outbox"
)

// laneHold is one lane lease held by this forwarder and its worker.
type laneHold struct {
	lane  int
	token outbox.Token
	// deadline is the last instant (Forwarder.mono) at which the worker may send: the
	// monotonic instant taken just before the statement that acquired or last renewed
	// the lease, plus LeaseTTL minus leaseMargin. The database set the lease's expiry
	// to its own now (later than that instant) plus LeaseTTL, so the worker stops
	// sending before any peer can take the lane over, whatever the wall clocks say.
	deadline  atomic.Int64
	ctx       context.Context
	cancel    context.CancelFunc // fencing: the lease is lost, stop at once
	release   chan struct{}      // handover: send the rows already claimed, then stop
	releasing bool
	lost      bool
	done      chan struct{}
}

// fairShare returns how many of lanes owner should hold among members: lanes/K, plus one
// for the first lanes%K members in sorted order.
func fairShare(members []string, owner string, lanes int) (share, index, k int) {
	if !slices.Contains(members, owner) {
		members = append(slices.Clone(members), owner)
	}
	sort.Strings(members)
	k = len(members)
	index = slices.Index(members, owner)
	share = lanes / k
	if index < lanes%k {
		share++
	}
	return share, index, k
}

// runLeases is the lease manager: every LeaseTTL/3 it heartbeats and renews the leases
// it holds (stopping a lane's worker at once when its renewal is refused); every
// min(LeaseTTL/3, MaxPollInterval) it reads the members and moves towards its fair share
// of lanes by acquiring free or expired leases or handing lanes over. After Close it
// keeps the leases of draining workers alive, then leaves.
func (f *Forwarder) runLeases() {
	defer f.services.Done()
	holds := map[int]*laneHold{}
	renewEvery := f.cfg.LeaseTTL / 3
	// Membership is checked more often than leases are renewed, so that lanes released
	// by a forwarder that left are taken over within about MaxPollInterval.
	tick := min(renewEvery, f.cfg.MaxPollInterval)
	var nextRenew, lastRenew time.Time
	for {
		// Renewals keep their cadence however long a round takes on a slow database.
		renew := !time.Now().Before(nextRenew)
		if renew {
			lastRenew = time.Now()
			nextRenew = lastRenew.Add(renewEvery)
		}
		f.leaseTick(holds, renew, renewEvery/2)
		if !sleep(max(min(tick, time.Until(nextRenew)), 0), f.stopping, nil) {
			break
		}
	}
	tick = renewEvery
	// Shutdown: workers send what they claimed and release their leases on exit.
	poll := min(tick, 20*time.Millisecond)
	for {
		f.reap(holds)
		if len(holds) == 0 {
			break
		}
		if time.Since(lastRenew) >= tick {
			f.renewLeases(holds)
			lastRenew = time.Now()
		}
		time.Sleep(poll)
	}
	ctx, cancel := context.WithTimeout(f.hardCtx, f.cfg.LeaseTTL)
	defer cancel()
	if err := f.store.Leave(ctx, f.cfg.Owner); err != nil {
		f.logger.Error("Cannot leave the members table (the heartbeat will expire)", err, nil)
	}
}

// reap forgets holds whose worker has exited (the worker released its lease).
func (f *Forwarder) reap(holds map[int]*laneHold) {
	for lane, h := range holds {
		select {
		case <-h.done:
			delete(holds, lane)
		default:
		}
	}
}

// leaseRenewers bounds the concurrent lease renewals: one after the other, 64 renewals
// on a loaded database can take longer than the lease lasts.
const leaseRenewers = 8

func (f *Forwarder) renewLeases(holds map[int]*laneHold) {
	ctx, cancel := context.WithTimeout(f.hardCtx, f.cfg.LeaseTTL)
	defer cancel()
	type result struct {
		h     *laneHold
		start time.Duration // Forwarder.mono before the statement
		ok    bool
		err   error
	}
	var results []result
	for _, h := range holds {
		if !h.lost {
			results = append(results, result{h: h})
		}
	}
	sem := make(chan struct{}, leaseRenewers)
	var wg sync.WaitGroup
	for i := range results {
		r := &results[i]
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			r.start = f.mono()
			r.ok, r.err = f.store.RenewLease(ctx, outbox.LeaseParams{Lane: r.h.lane, Owner: f.cfg.Owner, Token: r.h.token, TTL: f.cfg.LeaseTTL})
		}()
	}
	wg.Wait()
	for _, r := range results {
		h, lane := r.h, r.h.lane
		switch {
		case r.err != nil:
			if !h.live(f.mono()) {
				f.logger.Error("Lane lease expired while it could not be renewed; stopping the lane", r.err, watermill.LogFields{"lane": lane})
				h.lost = true
				h.cancel()
			} else {
				f.logger.Error("Cannot renew a lane lease; will retry", r.err, watermill.LogFields{"lane": lane})
			}
		case !r.ok:
			if !f.isStopping() { // at shutdown the worker has just released it
				f.logger.Info("Lane lease lost (taken over); stopping the lane", watermill.LogFields{"lane": lane})
			}
			h.lost = true
			h.cancel()
		default:
			h.extend(r.start, f.cfg.LeaseTTL)
		}
	}
}

// leaseTick runs one round of the lease manager. Acquiring lanes gets its own budget: at
// least one lane per round, more while the acquisitions took less than budget, so that
// taking many lanes on a slow database neither delays the renewals much nor starves.
func (f *Forwarder) leaseTick(holds map[int]*laneHold, renew bool, budget time.Duration) {
	ctx, cancel := context.WithTimeout(f.hardCtx, f.cfg.LeaseTTL)
	defer cancel()
	f.reap(holds)
	if renew {
		if err := f.store.Heartbeat(ctx, f.cfg.Owner, f.cfg.LeaseTTL); err != nil {
			f.logger.Error("Cannot record the forwarder's heartbeat", err, nil)
		}
		f.renewLeases(holds)
	}
	if f.isStopping() {
		return
	}
	if renew && f.cfg.StopLaneOnPoison {
		// Parked rows are few by design; listing them every renewal keeps stopped lanes
		// stopped across handovers and restarts, and resumes them once requeued.
		f.refreshParkedLanes(ctx)
	}
	members, err := f.store.Members(ctx)
	if err != nil {
		f.logger.Error("Cannot list forwarder members; keeping the current lanes", err, nil)
		return
	}
	lanes := f.opts.Lanes
	share, index, k := fairShare(members, f.cfg.Owner, lanes)
	f.members.Store(int64(k))

	var active []int
	for lane, h := range holds {
		if !h.lost && !h.releasing {
			active = append(active, lane)
		}
	}
	if len(active) > share {
		// Hand over the lanes farthest from this member's preferred range.
		start := index * lanes / k
		sort.Slice(active, func(i, j int) bool {
			return (active[i]-start+lanes)%lanes < (active[j]-start+lanes)%lanes
		})
		for _, lane := range active[share:] {
			h := holds[lane]
			h.releasing = true
			close(h.release)
			f.logger.Debug("Handing a lane over", watermill.LogFields{"lane": lane, "share": share, "members": k})
		}
		return
	}
	need := share - len(active)
	if need == 0 {
		return
	}
	leases, err := f.store.Leases(ctx)
	if err != nil {
		f.logger.Error("Cannot list lane leases", err, nil)
		return
	}
	if f.cfg.StopLaneOnPoison {
		// A lane about to be taken over may have been stopped by its previous owner. Its
		// park committed before it released the lease, so this listing, made after the
		// lease read that found the lane free, sees the parked row.
		f.refreshParkedLanes(ctx)
	}
	taken := make([]bool, lanes)
	for _, l := range leases {
		if l.Lane >= 0 && l.Lane < lanes && !l.Token.IsZero() && l.Live {
			taken[l.Lane] = true
		}
	}
	start := index * lanes / k
	acquireStart, acquired := time.Now(), 0
	for i := 0; i < lanes && need > 0 && (acquired == 0 || time.Since(acquireStart) < budget); i++ {
		lane := (start + i) % lanes
		if taken[lane] || holds[lane] != nil {
			continue
		}
		token := outbox.NewToken()
		start := f.mono()
		ok, err := f.store.AcquireLease(ctx, outbox.LeaseParams{Lane: lane, Owner: f.cfg.Owner, Token: token, TTL: f.cfg.LeaseTTL})
		if err != nil {
			f.logger.Error("Cannot acquire a lane lease", err, watermill.LogFields{"lane": lane})
			return
		}
		if !ok {
			continue // another forwarder was faster
		}
		if !f.startLane(holds, lane, token, start) {
			return
		}
		need--
		acquired++
	}
}

// startLane starts the worker of a freshly leased lane; false when the forwarder closed
// meanwhile (the lease is released again).
func (f *Forwarder) startLane(holds map[int]*laneHold, lane int, token outbox.Token, start time.Duration) bool {
	h := &laneHold{lane: lane, token: token, release: make(chan struct{}), done: make(chan struct{})}
	h.extend(start, f.cfg.LeaseTTL)
	h.ctx, h.cancel = context.WithCancel(f.hardCtx)
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		h.cancel()
		f.releaseLease(lane, token)
		return false
	}
	f.emitters.Add(1)
	f.mu.Unlock()
	holds[lane] = h
	f.held[lane].Store(true)
	f.reportLanesHeld()
	f.logger.Debug("Lane acquired", watermill.LogFields{"lane": lane})
	go newLaneWorker(f, h).run()
	return true
}

// live reports whether the worker may still send at mono (Forwarder.mono).
func (h *laneHold) live(mono time.Duration) bool { return int64(mono) < h.deadline.Load() }

// extend moves the deadline after a successful acquisition or renewal whose statement
// started at mono.
func (h *laneHold) extend(mono time.Duration, ttl time.Duration) {
	h.deadline.Store(int64(mono + ttl - leaseMargin(ttl)))
}

// leaseMargin is how long before the lease's expiry its holder stops sending: it covers
// a send that starts just before the deadline and a difference in the rates of the
// database's and this process's clocks.
func leaseMargin(ttl time.Duration) time.Duration { return ttl / 10 }

func (f *Forwarder) heldCount() int {
	n := 0
	for i := range f.held {
		if f.held[i].Load() {
			n++
		}
	}
	return n
}

func (f *Forwarder) releaseLease(lane int, token outbox.Token) {
	ctx, cancel := context.WithTimeout(f.hardCtx, f.cfg.LeaseTTL)
	defer cancel()
	if _, err := f.store.ReleaseLease(ctx, lane, token); err != nil {
		f.logger.Error("Cannot release a lane lease (it will expire)", err, watermill.LogFields{"lane": lane})
	}
}
