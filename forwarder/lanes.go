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
	lane      int
	token     outbox.Token
	until     atomic.Int64 // lease expiry (UnixNano, Config.Now's clock)
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
		now   time.Time
		until time.Time
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
			r.now = f.now()
			r.until = r.now.Add(f.cfg.LeaseTTL)
			r.ok, r.err = f.store.RenewLease(ctx, outbox.LeaseParams{Lane: r.h.lane, Owner: f.cfg.Owner, Token: r.h.token, TTL: f.cfg.LeaseTTL})
		}()
	}
	wg.Wait()
	for _, r := range results {
		h, lane := r.h, r.h.lane
		switch {
		case r.err != nil:
			if r.now.UnixNano() >= h.until.Load() {
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
			h.until.Store(r.until.UnixNano())
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
		at := f.now()
		until := at.Add(f.cfg.LeaseTTL)
		ok, err := f.store.AcquireLease(ctx, outbox.LeaseParams{Lane: lane, Owner: f.cfg.Owner, Token: token, TTL: f.cfg.LeaseTTL})
		if err != nil {
			f.logger.Error("Cannot acquire a lane lease", err, watermill.LogFields{"lane": lane})
			return
		}
		if !ok {
			continue // another forwarder was faster
		}
		if !f.startLane(holds, lane, token, until) {
			return
		}
		need--
		acquired++
	}
}

// startLane starts the worker of a freshly leased lane; false when the forwarder closed
// meanwhile (the lease is released again).
func (f *Forwarder) startLane(holds map[int]*laneHold, lane int, token outbox.Token, until time.Time) bool {
	h := &laneHold{lane: lane, token: token, release: make(chan struct{}), done: make(chan struct{})}
	h.until.Store(until.UnixNano())
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
	go f.runLane(h)
	return true
}

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

// queued is a claimed head row of a lane, waiting for its turn.
type queued struct {
	rec   outbox.Record
	token outbox.Token
	until time.Time
}

// runLane is the worker of one held lane: it claims the head run of the lane and sends
// it one message at a time, in id order, completing each before the next is sent; a
// refused completion (lease or claim lost) stops it at once. Claimed rows it will not
// send now (behind a failed head, of a held key, or at a handover or shutdown) are
// released, so that the lane is claimable again at once.
func (f *Forwarder) runLane(h *laneHold) {
	var queue, acked []queued // claimed rows not sent yet; sent rows not deleted yet
	defer func() {
		f.completeAcked(h, acked)
		f.releaseQueue(h, queue)
		f.held[h.lane].Store(false)
		f.releaseLease(h.lane, h.token)
		f.reportLanesHeld()
		h.cancel()
		close(h.done)
		f.emitters.Done()
	}()
	cfg := &f.cfg
	claimTTL := f.laneClaimTTL()
	lane := h.lane
	counters := &f.counters[lane+1]
	wakeCh := f.laneWake[lane]
	var (
		rt        renewTicker // renews the claims while a message waits
		notBefore time.Time   // a failed head is due again then (Config.Now's clock)
		idle      = cfg.PollInterval
		errDelay  = cfg.PollInterval
		// The scout's flag gates only idle polls: after a wake-up, a claim that took rows
		// or failed, the worker claims again whatever the flag says (the scout may not
		// have seen a lane's new rows yet); after a woken claim that found nothing, once
		// more (a lagging snapshot).
		woken bool
	)
	log := func(msg string, err error, extra watermill.LogFields) {
		fields := watermill.LogFields{"lane": lane}.Add(extra)
		if err != nil {
			f.logger.Error(msg, err, fields)
		} else {
			f.logger.Info(msg, fields)
		}
	}
	draining := func() bool {
		select {
		case <-h.release:
			return true
		case <-f.stopping:
			return true
		default:
			return false
		}
	}
	// pause waits d, a wake-up, a handover or shutdown; false when the lane must stop.
	pause := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-wakeCh:
			// A commit landed here: if its row is not claimable at once (a lagging
			// snapshot), look again soon rather than after a long idle pause.
			idle = cfg.PollInterval
			woken = true
		case <-h.release:
			return false
		case <-f.stopping:
			return false
		case <-h.ctx.Done():
			return false
		}
		return true
	}
	// renewHeld keeps the claims of the queued rows alive while the worker waits on the
	// consumer or the handler; the head stays in place even when its claim is gone (its
	// completion is then refused and the lane stops).
	renewHeld := func() {
		now := f.now()
		if len(queue) == 0 || queue[0].until.Sub(now) >= claimTTL/2 {
			return
		}
		head := queue[0]
		queue, _ = f.renewQueue(h, queue, now, acked)
		if len(queue) == 0 || queue[0].rec.ID != head.rec.ID {
			queue = append([]queued{head}, queue...)
		}
	}
	leaseLive := func(now time.Time) bool {
		// Stop sending a little before the lease runs out, so that a takeover never
		// overlaps with a send of ours.
		return now.Add(cfg.LeaseTTL/10).UnixNano() < h.until.Load()
	}

	for {
		if h.ctx.Err() != nil || draining() {
			return
		}
		now := f.now()
		if !leaseLive(now) {
			// The lease manager has not renewed in time (slow database): send nothing
			// until it does, or until it declares the lease lost and stops this worker.
			if !pause(cfg.PollInterval) {
				return
			}
			continue
		}
		if len(queue) == 0 && len(acked) > 0 {
			// The claimed run is sent: delete it (fenced) before claiming the next one,
			// which these rows' claims would otherwise hold.
			ok := f.completeAcked(h, acked)
			acked = acked[:0]
			if !ok {
				return
			}
		}
		if len(queue) > 0 && queue[0].until.Sub(now) < claimTTL/2 {
			var ok bool
			if queue, ok = f.renewQueue(h, queue, now, acked); !ok {
				if !pause(errDelay) {
					return
				}
				continue
			}
		}
		if len(queue) == 0 {
			if cfg.StopLaneOnPoison && f.laneStopped(lane) {
				if !pause(cfg.MaxPollInterval) {
					return
				}
				continue
			}
			if now.Before(notBefore) {
				if !pause(notBefore.Sub(now)) {
					return
				}
				continue
			}
			if !woken && !f.lanePending[lane].Load() {
				// The scout saw no pending row here: wait for it (or a commit) to wake us.
				if !pause(cfg.MaxPollInterval) {
					return
				}
				continue
			}
			wasWoken := woken
			woken = true // until a claim finds nothing (below)
			token := outbox.NewToken()
			until := now.Add(claimTTL)
			recs, err := f.store.Claim(h.ctx, outbox.ClaimParams{
				Lane: lane, Limit: cfg.LaneBatch, Now: now, Until: until, Token: token,
				Lease: h.token, HoldParkedKeys: cfg.HoldParkedKeys,
			}, nil)
			if err != nil {
				if h.ctx.Err() != nil {
					return
				}
				log("Cannot claim the head of a lane; backing off", err, watermill.LogFields{"retry_in": errDelay})
				if !pause(errDelay) {
					return
				}
				errDelay = min(2*errDelay, cfg.MaxPollInterval)
				continue
			}
			errDelay = cfg.PollInterval
			if len(recs) == 0 {
				woken = wasWoken && idle == cfg.PollInterval // one more look right after a wake-up
				d := idle
				idle = min(2*idle, cfg.MaxPollInterval)
				if !pause(d) {
					return
				}
				continue
			}
			idle = cfg.PollInterval
			queue = make([]queued, len(recs))
			for i := range recs {
				queue[i] = queued{rec: recs[i], token: token, until: until}
			}
		}

		q := queue[0]
		msg, d, reason := f.prepare(&q.rec)
		if reason != "" {
			log("Parking a row that cannot be sent", nil, watermill.LogFields{"row_id": q.rec.ID.String(), "reason": reason})
			if !f.failLaneRow(h, &q, reason, time.Time{}, true) {
				return
			}
			queue = f.afterPark(h, queue)
			continue
		}
		counters.inFlight.Add(1)
		f.reportInFlight(lane)
		sent := f.emit(h.ctx, msg, &rt, claimTTL/4, renewHeld)
		var ok, settled bool
		if sent {
			// A slow handler (a broker retrying for long) must not let the claims of the
			// row in flight and of the rows queued behind it expire.
			renew := rt.start(claimTTL / 4)
		wait:
			for {
				select {
				case <-msg.Acked():
					ok, settled = true, true
					break wait
				case <-msg.Nacked():
					settled = true
					break wait
				case <-h.ctx.Done():
					break wait
				case <-f.abandon:
					break wait
				case <-renew:
					renewHeld()
				}
			}
			rt.stop()
		}
		counters.inFlight.Add(-1)
		f.reportInFlight(lane)
		q = queue[0] // with its renewed claim expiry
		if !settled {
			if sent {
				queue = queue[1:] // still in the handler: its claim expires by itself
			}
			return
		}
		if ok {
			queue = queue[1:]
			if cfg.BatchLaneDeletes {
				// Deleted with the rest of the run (one statement); the next row goes
				// out after leaseLive only (see Config.BatchLaneDeletes).
				acked = append(acked, q)
				continue
			}
			// The fenced delete is the store's word that this worker still owns the
			// lane: the next row goes out only after it.
			if !f.completeAcked(h, []queued{q}) {
				return
			}
			continue
		}
		attempts := q.rec.Attempts + 1
		park := attempts >= cfg.MaxAttempts
		at := f.now().Add(cfg.backoff(attempts))
		if !f.failLaneRow(h, &q, d.failure(), at, park) {
			queue = queue[1:] // its claim expires: a natural backoff
			return
		}
		if park {
			log("Row parked after too many attempts", nil, watermill.LogFields{"row_id": q.rec.ID.String(), "attempts": attempts, "last_error": d.failure()})
			queue = f.afterPark(h, queue)
			continue
		}
		// The failed head is due again at its retry time and holds the lane until then:
		// give the rows behind it back and claim the head run again when it is due.
		f.releaseQueue(h, queue[1:])
		queue, notBefore = nil, at
	}
}

// laneClaimTTL is the lifetime of lane row claims: no longer than the lease, since a
// worker that lost its lease can neither complete nor release them, and its successor
// waits for them to expire.
func (f *Forwarder) laneClaimTTL() time.Duration { return min(f.cfg.ClaimTTL, f.cfg.LeaseTTL) }

// afterPark drops the parked head and releases what may no longer follow it: the whole
// queue when the lane stops on poison, the rows of the parked key when keys are held.
func (f *Forwarder) afterPark(h *laneHold, queue []queued) []queued {
	parked := queue[0]
	queue = queue[1:]
	switch {
	case f.cfg.StopLaneOnPoison:
		f.stopLane(h.lane)
		f.releaseQueue(h, queue)
		return nil
	case f.cfg.HoldParkedKeys && parked.rec.OrderingKey != "":
		var kept, held []queued
		for _, q := range queue {
			if q.rec.OrderingKey == parked.rec.OrderingKey {
				held = append(held, q)
			} else {
				kept = append(kept, q)
			}
		}
		f.releaseQueue(h, held)
		return kept
	}
	return queue
}

// releaseQueue gives back the claims of rows the worker will not send now (fenced by
// the lease; after a lost lease nothing is released and the claims expire).
func (f *Forwarder) releaseQueue(h *laneHold, queue []queued) {
	if len(queue) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(f.hardCtx, f.cfg.LeaseTTL)
	defer cancel()
	byToken := map[outbox.Token][]outbox.ID{}
	for _, q := range queue {
		byToken[q.token] = append(byToken[q.token], q.rec.ID)
	}
	for token, ids := range byToken {
		if _, err := f.store.Release(ctx, outbox.ReleaseParams{Token: token, IDs: ids, Now: f.now(), Lane: h.lane, Lease: h.token}); err != nil {
			f.logger.Error("Cannot release claimed rows of a lane (their claims expire)", err, watermill.LogFields{"lane": h.lane, "rows": len(ids)})
		}
	}
}

// renewQueue extends the claims of the queued rows; rows whose claim is gone are dropped.
// ok is false on a database error.
func (f *Forwarder) renewQueue(h *laneHold, queue []queued, now time.Time, acked []queued) ([]queued, bool) {
	until := now.Add(f.laneClaimTTL())
	renewed := map[outbox.Token]bool{}
	for _, q := range queue {
		if _, seen := renewed[q.token]; seen {
			continue
		}
		n, err := f.store.Renew(h.ctx, outbox.RenewParams{Token: q.token, Now: now, Until: until, Lane: h.lane, Lease: h.token})
		if err != nil {
			f.logger.Error("Cannot renew the claims of a lane's queued rows", err, watermill.LogFields{"lane": h.lane})
			return queue, false
		}
		renewed[q.token] = n > 0
	}
	kept := queue[:0]
	for _, q := range queue {
		if renewed[q.token] {
			q.until = until
			kept = append(kept, q)
		}
	}
	// Sent rows waiting for their delete share the tokens (Renew covers every claim of
	// a token).
	for i := range acked {
		if renewed[acked[i].token] {
			acked[i].until = until
		}
	}
	return kept, true
}

// completeAcked deletes the sent rows of the lane with the lane's lease, one statement per
// claim token, and counts them; false when the lease or a claim is gone (the lane stops:
// another forwarder owns it, and the rows are sent again there).
func (f *Forwarder) completeAcked(h *laneHold, acked []queued) bool {
	for len(acked) > 0 {
		token := acked[0].token
		var ids []outbox.ID
		group := acked[0]
		rest := acked[:0:0]
		for _, q := range acked {
			if q.token == token {
				ids = append(ids, q.rec.ID)
				group.until = q.until
			} else {
				rest = append(rest, q)
			}
		}
		ok := f.retryLane(h, &group, "complete", func(ctx context.Context) (bool, error) {
			n, err := f.store.Complete(ctx, outbox.CompleteParams{Token: token, IDs: ids, Now: f.now(), Lane: h.lane, Lease: h.token})
			if n > 0 {
				f.counters[h.lane+1].sent.Add(uint64(n))
				for range n {
					f.metrics.MessageSent(h.lane)
				}
			}
			return n == len(ids), err
		})
		if !ok {
			return false
		}
		acked = rest
	}
	return true
}

// failLaneRow records a failed attempt (or parks) with the lane's lease.
func (f *Forwarder) failLaneRow(h *laneHold, q *queued, reason string, retryAt time.Time, park bool) bool {
	ok := f.retryLane(h, q, "fail", func(ctx context.Context) (bool, error) {
		return f.store.Fail(ctx, outbox.FailParams{
			ID: q.rec.ID, Token: q.token, Now: f.now(), Error: reason, RetryAt: retryAt, Park: park,
			Lane: h.lane, Lease: h.token,
		})
	})
	if ok {
		f.countFailure(h.lane, park)
	}
	return ok
}

// retryLane runs a fenced store update, retrying database errors while the claim and
// the lease may still be live.
func (f *Forwarder) retryLane(h *laneHold, q *queued, what string, op func(context.Context) (bool, error)) bool {
	delay := 20 * time.Millisecond
	for {
		ok, err := op(h.ctx)
		if err == nil {
			if !ok {
				f.logger.Info("Lane row update refused (lease or claim lost); stopping the lane",
					watermill.LogFields{"lane": h.lane, "row_id": q.rec.ID.String(), "op": what})
				h.cancel()
			}
			return ok
		}
		now := f.now()
		if h.ctx.Err() != nil || !now.Before(q.until) || now.UnixNano() >= h.until.Load() {
			f.logger.Error("Giving up a lane row update; stopping the lane", err, watermill.LogFields{"lane": h.lane, "op": what})
			h.cancel()
			return false
		}
		f.logger.Error("Lane row update failed; retrying", err, watermill.LogFields{"lane": h.lane, "op": what, "retry_in": delay})
		select {
		case <-time.After(delay):
		case <-h.ctx.Done():
			return false
		case <-f.abandon:
			return false
		}
		delay = min(2*delay, time.Second)
	}
}

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
