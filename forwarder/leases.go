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
	release   chan struct{}      // handover: stop after the messages in flight
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

// leaseManager is the service that holds this forwarder's lane leases: every LeaseTTL/3
// it heartbeats and renews the leases it holds (stopping a lane's worker at once when
// its renewal is refused); every min(LeaseTTL/3, MaxPollInterval) it reads the members
// and moves towards its fair share of lanes, acquiring free or expired leases (a lane
// worker starts for each) or handing lanes over. After Close it keeps the leases of
// draining workers alive until they exit, then leaves the members table.
type leaseManager struct {
	f          *Forwarder
	holds      map[int]*laneHold
	renewEvery time.Duration
	// tick is the membership check's period: more often than renewals, so that lanes
	// released by a forwarder that left are taken over within about MaxPollInterval.
	tick                 time.Duration
	nextRenew, lastRenew time.Time
}

func newLeaseManager(f *Forwarder) *leaseManager {
	every := f.cfg.LeaseTTL / 3
	return &leaseManager{f: f, holds: map[int]*laneHold{}, renewEvery: every, tick: min(every, f.cfg.MaxPollInterval)}
}

// run is the service's loop, until Close; then shutdown.
func (m *leaseManager) run() {
	defer m.f.services.Done()
	for {
		// Renewals keep their cadence however long a round takes on a slow database.
		renew := !time.Now().Before(m.nextRenew)
		if renew {
			m.lastRenew = time.Now()
			m.nextRenew = m.lastRenew.Add(m.renewEvery)
		}
		m.round(renew, m.renewEvery/2)
		if !sleep(max(min(m.tick, time.Until(m.nextRenew)), 0), m.f.stopping, nil) {
			break
		}
	}
	m.shutdown()
}

// shutdown keeps renewing the leases of the workers still draining (they release their
// leases on exit), then leaves the members table.
func (m *leaseManager) shutdown() {
	f := m.f
	poll := min(m.renewEvery, 20*time.Millisecond)
	for m.reap(); len(m.holds) > 0; m.reap() {
		if time.Since(m.lastRenew) >= m.renewEvery {
			m.renew()
			m.lastRenew = time.Now()
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
func (m *leaseManager) reap() {
	for lane, h := range m.holds {
		select {
		case <-h.done:
			delete(m.holds, lane)
		default:
		}
	}
}

// leaseConcurrency bounds the lease statements (renewals, acquisitions) the lease
// manager runs at once: one after the other, 64 renewals on a loaded database can take
// longer than the lease lasts, and a forwarder that starts took 64 lanes in 126–183 ms
// on PostgreSQL while Kafka (kfake) and the database shared two cores.
const leaseConcurrency = 8

// leaseCall is one lease statement (renewal or acquisition) and its outcome.
type leaseCall struct {
	lane  int
	token outbox.Token
	start time.Duration // Forwarder.mono before the statement
	ok    bool
	err   error
}

// runLeaseCalls runs op for every call, up to leaseConcurrency at once, and returns
// when all have answered.
func (m *leaseManager) runLeaseCalls(ctx context.Context, calls []leaseCall, op func(context.Context, outbox.LeaseParams) (bool, error)) {
	f := m.f
	sem := make(chan struct{}, leaseConcurrency)
	var wg sync.WaitGroup
	for i := range calls {
		c := &calls[i]
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			c.start = f.mono()
			c.ok, c.err = op(ctx, outbox.LeaseParams{Lane: c.lane, Owner: f.cfg.Owner, Token: c.token, TTL: f.cfg.LeaseTTL})
		}()
	}
	wg.Wait()
}

// renew renews every held lease (up to leaseConcurrency at once) and applies the
// outcomes.
func (m *leaseManager) renew() {
	f := m.f
	ctx, cancel := context.WithTimeout(f.hardCtx, f.cfg.LeaseTTL)
	defer cancel()
	var calls []leaseCall
	for _, h := range m.holds {
		if !h.lost {
			calls = append(calls, leaseCall{lane: h.lane, token: h.token})
		}
	}
	m.runLeaseCalls(ctx, calls, f.store.RenewLease)
	for _, c := range calls {
		m.apply(m.holds[c.lane], c)
	}
}

// apply moves a lane's deadline after a renewal, or stops its worker when the lease is
// lost (refused, or expired while it could not be renewed).
func (m *leaseManager) apply(h *laneHold, r leaseCall) {
	f := m.f
	switch {
	case r.err != nil && h.live(f.mono()):
		f.logger.Error("Cannot renew a lane lease; will retry", r.err, watermill.LogFields{"lane": h.lane})
	case r.err != nil:
		f.logger.Error("Lane lease expired while it could not be renewed; stopping the lane", r.err, watermill.LogFields{"lane": h.lane})
		h.lost = true
		h.cancel()
	case !r.ok:
		if !f.isStopping() { // at shutdown the worker has just released it
			f.logger.Info("Lane lease lost (taken over); stopping the lane", watermill.LogFields{"lane": h.lane})
		}
		h.lost = true
		h.cancel()
	default:
		h.extend(r.start, f.cfg.LeaseTTL)
	}
}

// round runs one round of the lease manager: heartbeat and renewals when due, then the
// rebalancing towards the fair share. Acquiring lanes gets its own budget: at least one
// lane per round, more while the acquisitions took less than budget, so that taking
// many lanes on a slow database neither delays the renewals much nor starves.
func (m *leaseManager) round(renew bool, budget time.Duration) {
	f := m.f
	ctx, cancel := context.WithTimeout(f.hardCtx, f.cfg.LeaseTTL)
	defer cancel()
	m.reap()
	if renew {
		if err := f.store.Heartbeat(ctx, f.cfg.Owner, f.cfg.LeaseTTL); err != nil {
			f.logger.Error("Cannot record the forwarder's heartbeat", err, nil)
		}
		m.renew()
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
	share, index, k := fairShare(members, f.cfg.Owner, f.opts.Lanes)
	f.members.Store(int64(k))
	active := m.active()
	if len(active) > share {
		m.handOver(active, share, index, k)
		return
	}
	if need := share - len(active); need > 0 {
		m.acquire(ctx, need, index*f.opts.Lanes/k, budget)
	}
}

// active lists the held lanes whose lease is neither lost nor being handed over.
func (m *leaseManager) active() []int {
	var active []int
	for lane, h := range m.holds {
		if !h.lost && !h.releasing {
			active = append(active, lane)
		}
	}
	return active
}

// handOver asks the workers of the lanes beyond share, farthest from this member's
// preferred range first, to stop: they release their leases on exit.
func (m *leaseManager) handOver(active []int, share, index, k int) {
	lanes := m.f.opts.Lanes
	start := index * lanes / k
	sort.Slice(active, func(i, j int) bool {
		return (active[i]-start+lanes)%lanes < (active[j]-start+lanes)%lanes
	})
	for _, lane := range active[share:] {
		h := m.holds[lane]
		h.releasing = true
		close(h.release)
		m.f.logger.Debug("Handing a lane over", watermill.LogFields{"lane": lane, "share": share, "members": k})
	}
}

// acquire takes up to need free or expired lanes, nearest to lane start first, within
// budget (at least one attempt), up to leaseConcurrency at once.
func (m *leaseManager) acquire(ctx context.Context, need, start int, budget time.Duration) {
	f := m.f
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
	free := m.free(leases, start)
	began, acquired := time.Now(), 0
	for len(free) > 0 && need > 0 && (acquired == 0 || time.Since(began) < budget) {
		calls := make([]leaseCall, min(need, leaseConcurrency, len(free)))
		for i := range calls {
			calls[i] = leaseCall{lane: free[i], token: outbox.NewToken()}
		}
		free = free[len(calls):]
		m.runLeaseCalls(ctx, calls, f.store.AcquireLease)
		// Every lease acquired is started (or, once closed, released again) before
		// anything else: none may stay taken with no worker until it expires.
		stop := false
		for _, c := range calls {
			switch {
			case c.err != nil:
				if !stop { // one line per wave while the database is down
					f.logger.Error("Cannot acquire a lane lease", c.err, watermill.LogFields{"lane": c.lane})
				}
				stop = true
			case !c.ok: // another forwarder was faster
			case !m.startLane(c.lane, c.token, c.start):
				stop = true
			default:
				need--
				acquired++
			}
		}
		if stop {
			return
		}
	}
}

// free lists the lanes that neither a live lease (leases) nor this forwarder holds,
// from lane start on.
func (m *leaseManager) free(leases []outbox.Lease, start int) []int {
	lanes := m.f.opts.Lanes
	taken := make([]bool, lanes)
	for _, l := range leases {
		if l.Lane >= 0 && l.Lane < lanes && !l.Token.IsZero() && l.Live {
			taken[l.Lane] = true
		}
	}
	var free []int
	for i := range lanes {
		if lane := (start + i) % lanes; !taken[lane] && m.holds[lane] == nil {
			free = append(free, lane)
		}
	}
	return free
}

// startLane starts the worker of a freshly leased lane (acquired by a statement that
// started at mono); false when the forwarder closed meanwhile (the lease is released
// again).
func (m *leaseManager) startLane(lane int, token outbox.Token, mono time.Duration) bool {
	f := m.f
	h := &laneHold{lane: lane, token: token, release: make(chan struct{}), done: make(chan struct{})}
	h.extend(mono, f.cfg.LeaseTTL)
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
	m.holds[lane] = h
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
