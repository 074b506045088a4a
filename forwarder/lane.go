package forwarder

import (
	"context"
	"errors"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
)

// laneWorker sends the rows of one lane this forwarder holds the lease of. Under the
// live lease it is the lane's only sender, so it claims nothing: it reads the head run
// of the lane (Store.Head, no writes), sends it in id order, and deletes the sent rows
// with one statement fenced by the lease (Store.Complete with a zero Token). Before
// every send it checks that the lease is live by the monotonic deadline the lease
// manager keeps (laneHold.live). A failed row is failed (fenced) and holds the lane
// until it is due again; a row that cannot be sent is parked.
type laneWorker struct {
	f    *Forwarder
	h    *laneHold
	lane int
	cfg  *Config

	head      []outbox.Record // the head run being sent; reused
	notBefore time.Time       // a failed head is due again then (Config.Now's clock)
	idle      time.Duration   // the next idle pause (doubles up to MaxPollInterval)
	errDelay  time.Duration   // the next pause after a failed statement
	// The scout's flag gates only idle polls: after a wake-up or a read that found rows
	// the worker reads again whatever the flag says (the scout may not have seen a
	// lane's new rows yet); after a woken read that found nothing, once more (a lagging
	// snapshot).
	woken bool
}

// runResult is how far a run got: its leading sent rows were delivered; the row after
// them failed (failed != nil) or the lane must stop (stop).
type runResult struct {
	sent   int
	failed *outbox.Record
	reason string // the failure, stored as the row's last error
	park   bool   // park failed (it cannot be sent, or its attempts are used up)
	stop   bool   // the lease is gone, the forwarder is abandoning, or the lane is handed over
}

func newLaneWorker(f *Forwarder, h *laneHold) *laneWorker {
	return &laneWorker{f: f, h: h, lane: h.lane, cfg: &f.cfg, idle: f.cfg.PollInterval, errDelay: f.cfg.PollInterval}
}

// run is the worker's loop; it releases the lease when it ends.
func (w *laneWorker) run() {
	defer w.exit()
	for w.h.ctx.Err() == nil && !w.draining() {
		if !w.step() {
			return
		}
	}
}

// exit hands the lane back: the lease is released so that another forwarder can take
// the lane at once (rows sent and not deleted are sent again there).
func (w *laneWorker) exit() {
	f := w.f
	f.held[w.lane].Store(false)
	f.releaseLease(w.lane, w.h.token)
	f.reportLanesHeld()
	w.h.cancel()
	close(w.h.done)
	f.emitters.Done()
}

// step reads and sends one head run, or waits; false when the lane must stop.
func (w *laneWorker) step() bool {
	f, cfg := w.f, w.cfg
	now := f.now()
	switch {
	case !w.h.live(f.mono()):
		// The lease manager has not renewed in time (slow database): send nothing until
		// it does, or until it declares the lease lost and stops this worker.
		return w.pause(cfg.PollInterval)
	case cfg.StopLaneOnPoison && f.laneStopped(w.lane):
		return w.pause(cfg.MaxPollInterval)
	case now.Before(w.notBefore):
		return w.pause(w.notBefore.Sub(now))
	case !w.woken && !f.lanePending[w.lane].Load():
		// The scout saw no pending row here: wait for it (or a commit) to wake us.
		return w.pause(cfg.MaxPollInterval)
	}
	wasWoken := w.woken
	w.woken = true // until a read finds nothing (below)
	var err error
	f.laneSem <- struct{}{}
	w.head, err = f.store.Head(w.h.ctx, outbox.HeadQuery{Lane: w.lane, Limit: cfg.LaneBatch, Now: now, HoldParkedKeys: cfg.HoldParkedKeys}, w.head)
	<-f.laneSem
	switch {
	case err != nil:
		if w.h.ctx.Err() != nil {
			return false
		}
		w.log("Cannot read the head of a lane; backing off", err, watermill.LogFields{"retry_in": w.errDelay})
		d := w.errDelay
		w.errDelay = min(2*w.errDelay, cfg.MaxPollInterval)
		return w.pause(d)
	case len(w.head) == 0:
		w.errDelay = cfg.PollInterval
		w.woken = wasWoken && w.idle == cfg.PollInterval // one more look right after a wake-up
		d := w.idle
		w.idle = min(2*w.idle, cfg.MaxPollInterval)
		return w.pause(d)
	}
	w.errDelay, w.idle = cfg.PollInterval, cfg.PollInterval
	var res runResult
	if f.direct {
		res = w.publishRun()
	} else {
		res = w.emitRun()
	}
	return w.settle(res)
}

// settle deletes the sent rows of the run (one fenced statement) and records the
// failure that ended it; false when the lane must stop.
func (w *laneWorker) settle(res runResult) bool {
	if res.sent > 0 && !w.complete(w.head[:res.sent]) {
		return false
	}
	if res.failed != nil && !w.fail(res) {
		return false
	}
	return !res.stop
}

// complete deletes the sent rows with the lease and counts them; false when the lease
// is gone (another forwarder owns the lane and sends them again).
func (w *laneWorker) complete(sent []outbox.Record) bool {
	f := w.f
	ids := make([]outbox.ID, len(sent))
	for i := range sent {
		ids[i] = sent[i].ID
	}
	return w.fenced("complete", func(ctx context.Context) (bool, error) {
		f.laneSem <- struct{}{}
		n, err := f.store.Complete(ctx, outbox.CompleteParams{IDs: ids, Now: f.now(), Lane: w.lane, Lease: w.h.token})
		<-f.laneSem
		if n > 0 {
			f.counters[w.lane+1].sent.Add(uint64(n))
			for range n {
				f.metrics.MessageSent(w.lane)
			}
		}
		return n == len(ids), err
	})
}

// fail records the failed attempt of the row that ended the run (or parks it); a row
// that is retried holds the lane until it is due again.
func (w *laneWorker) fail(res runResult) bool {
	f, cfg, rec := w.f, w.cfg, res.failed
	attempts := rec.Attempts + 1
	park := res.park || attempts >= cfg.MaxAttempts
	var retryAt time.Time
	if !park {
		retryAt = f.now().Add(cfg.backoff(attempts))
	}
	ok := w.fenced("fail", func(ctx context.Context) (bool, error) {
		return f.store.Fail(ctx, outbox.FailParams{ID: rec.ID, Now: f.now(), Error: res.reason, RetryAt: retryAt, Park: park, Lane: w.lane, Lease: w.h.token})
	})
	if !ok {
		return false
	}
	f.countFailure(w.lane, park)
	switch {
	case park:
		w.log("Row parked", nil, watermill.LogFields{"row_id": rec.ID.String(), "attempts": attempts, "reason": res.reason})
		if cfg.StopLaneOnPoison {
			f.stopLane(w.lane)
		}
	default:
		w.notBefore = retryAt
	}
	return true
}

// fenced runs a store update fenced by the lease, retrying database errors while the
// lease may still be live. A refused update (the lease is gone) stops the lane.
func (w *laneWorker) fenced(what string, op func(context.Context) (bool, error)) bool {
	f := w.f
	delay := 20 * time.Millisecond
	for {
		ok, err := op(w.h.ctx)
		if err == nil {
			if !ok {
				w.log("Lane update refused (lease lost); stopping the lane", nil, watermill.LogFields{"op": what})
				w.h.cancel()
			}
			return ok
		}
		if w.h.ctx.Err() != nil || !w.h.live(f.mono()) {
			w.log("Giving up a lane update; stopping the lane", err, watermill.LogFields{"op": what})
			w.h.cancel()
			return false
		}
		w.log("Lane update failed; retrying", err, watermill.LogFields{"op": what, "retry_in": delay})
		if !sleep(delay, f.abandon, nil) {
			return false
		}
		delay = min(2*delay, time.Second)
	}
}

// emitRun hands the run's rows to the router one at a time, each after the previous
// one was acked: a router may handle messages concurrently, so this is what keeps
// them in order.
func (w *laneWorker) emitRun() runResult {
	f := w.f
	counters := &f.counters[w.lane+1]
	var rt renewTicker
	defer rt.stop()
	for i := range w.head {
		if w.draining() || !w.h.live(f.mono()) {
			return runResult{sent: i}
		}
		msg, d, reason := f.prepare(&w.head[i])
		if reason != "" {
			return runResult{sent: i, failed: &w.head[i], reason: reason, park: true}
		}
		counters.inFlight.Add(1)
		f.reportInFlight(w.lane)
		acked, settled := w.deliver(msg, &rt)
		counters.inFlight.Add(-1)
		f.reportInFlight(w.lane)
		switch {
		case !settled:
			return runResult{sent: i, stop: true}
		case !acked:
			return runResult{sent: i, failed: &w.head[i], reason: d.failure()}
		}
	}
	return runResult{sent: len(w.head)}
}

// deliver emits msg and waits for its ack or nack; settled is false when the lease was
// lost or the forwarder abandons its messages first.
func (w *laneWorker) deliver(msg *message.Message, rt *renewTicker) (acked, settled bool) {
	if !w.f.emit(w.h.ctx, msg, rt, time.Hour, func() {}) {
		return false, false
	}
	switch await(msg, nil, w.h.ctx.Done(), w.f.abandon) {
	case outcomeAcked:
		return true, true
	case outcomeNacked:
		return false, true
	}
	return false, false
}

// publishRun sends the run straight to the target publishers (Run, no router):
// consecutive rows of one transport and topic go in one Publish call, which Watermill's
// publishers send in order. When a call fails, its messages are published again one at
// a time, so that the failure lands on the row that causes it; a row that failed before
// is published alone.
func (w *laneWorker) publishRun() runResult {
	f := w.f
	counters := &f.counters[w.lane+1]
	msgs := make([]*message.Message, 0, len(w.head))
	for start := 0; start < len(w.head); {
		if w.draining() || !w.h.live(f.mono()) {
			return runResult{sent: start}
		}
		first := &w.head[start]
		end, reason := start, ""
		msgs = msgs[:0]
		for ; end < len(w.head); end++ {
			r := &w.head[end]
			if end > start && (r.Transport != first.Transport || r.Destination != first.Destination ||
				r.Attempts > 0 || first.Attempts > 0) {
				break // a row that failed before goes alone: its next failure is its own
			}
			var msg *message.Message
			if msg, _, reason = f.prepare(r); reason != "" {
				break
			}
			msgs = append(msgs, msg)
		}
		if len(msgs) > 0 {
			counters.inFlight.Add(int64(len(msgs)))
			f.reportInFlight(w.lane)
			err := f.targets[first.Transport].Publish(first.Destination, msgs...)
			counters.inFlight.Add(-int64(len(msgs)))
			f.reportInFlight(w.lane)
			if err != nil && len(msgs) == 1 {
				w.log("Publishing a lane row failed; it is retried after backoff", err, watermill.LogFields{"row_id": first.ID.String()})
				return runResult{sent: start, failed: first, reason: err.Error()}
			}
			if err != nil {
				// Which of the messages went out is unknown: send them one at a time, so
				// that the failure lands on the row that causes it (a poison message must
				// not fail the rows before it). Those already sent are sent again.
				if i, err := w.publishSingles(start, start+len(msgs)); err != nil {
					w.log("Publishing a lane row failed; it is retried after backoff", err, watermill.LogFields{"row_id": w.head[i].ID.String()})
					return runResult{sent: i, failed: &w.head[i], reason: err.Error()}
				}
			}
		}
		if reason != "" {
			return runResult{sent: end, failed: &w.head[end], reason: reason, park: true}
		}
		start = end
	}
	return runResult{sent: len(w.head)}
}

// publishSingles publishes the rows head[from:to] (all of which prepare accepted) one
// Publish call each, in order, and returns the index of the first that failed, with its
// error.
func (w *laneWorker) publishSingles(from, to int) (int, error) {
	for i := from; i < to; i++ {
		if !w.h.live(w.f.mono()) {
			return i, errLeaseDeadline
		}
		r := &w.head[i]
		msg, _, _ := w.f.prepare(r)
		if err := w.f.targets[r.Transport].Publish(r.Destination, msg); err != nil {
			return i, err
		}
	}
	return to, nil
}

// draining reports a handover or a shutdown: send nothing more.
func (w *laneWorker) draining() bool {
	select {
	case <-w.h.release:
		return true
	case <-w.f.stopping:
		return true
	default:
		return false
	}
}

// pause waits d, a wake-up, a handover or shutdown; false when the lane must stop.
func (w *laneWorker) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-w.f.laneWake[w.lane]:
		// A commit landed here: if its row is not visible at once (a lagging snapshot),
		// look again soon rather than after a long idle pause.
		w.idle = w.cfg.PollInterval
		w.woken = true
	case <-w.h.release:
		return false
	case <-w.f.stopping:
		return false
	case <-w.h.ctx.Done():
		return false
	}
	return true
}

func (w *laneWorker) log(msg string, err error, extra watermill.LogFields) {
	fields := watermill.LogFields{"lane": w.lane}.Add(extra)
	if err != nil {
		w.f.logger.Error(msg, err, fields)
	} else {
		w.f.logger.Info(msg, fields)
	}
}

// errLeaseDeadline ends a run whose lease deadline passed before a send.
var errLeaseDeadline = errors.New("forwarder: lane lease deadline passed before the send")
