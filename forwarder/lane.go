package forwarder

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	outbox "github.com/relayer-go/watermill-outbox"
)

// laneWorker sends the rows of one lane this forwarder holds the lease of. Under the
// live lease it is the lane's only sender, so it claims nothing: it reads the head run
// of the lane (Store.Head, no writes), sends each ordering key's rows of the run in id
// order (up to KeysInFlight keys at once, lanerun.go), and deletes the sent rows with
// one statement fenced by the lease (Store.Complete with a zero Token). Before every
// send it checks that the lease is live by the monotonic deadline the lease manager
// keeps (laneHold.live). A failed row is failed (fenced), ends its key's part of the
// run and holds the lane until it is due again; a row that cannot be sent is parked.
type laneWorker struct {
	f    *Forwarder
	h    *laneHold
	lane int
	cfg  *Config

	head      []outbox.Record // the head run being sent; reused, but not its buffers (takeHead)
	dels      []delivery      // the head run's deliveries; new for each run
	parts     []keyPart       // the head run cut by ordering key; reused
	partOf    map[string]int  // ordering key → its index in parts; reused
	res       runResult       // what sending the run did; reused
	halt      atomic.Bool     // a key of the run failed: start no further key
	notBefore time.Time       // a failed head is due again then (Config.Now's clock)
	idle      time.Duration   // the next idle pause (doubles up to MaxPollInterval)
	// emptyWakes counts the reads after wake-ups in a row that found nothing; from the
	// second on, wake-ups before quietUntil (time.Now's clock) are merged into one read
	// then: a flood of wake-ups without rows costs one read per PollInterval (at most
	// wakeQuietMax).
	emptyWakes int
	quietUntil time.Time
	errDelay   time.Duration // the next pause after a failed statement
	// The scout's flag gates only idle polls: after a wake-up or a read that found rows
	// the worker reads again whatever the flag says (the scout may not have seen a
	// lane's new rows yet); after a woken read that found nothing, once more (a lagging
	// snapshot).
	woken bool
}

func newLaneWorker(f *Forwarder, h *laneHold) *laneWorker {
	return &laneWorker{f: f, h: h, lane: h.lane, cfg: &f.cfg, partOf: make(map[string]int),
		idle: f.cfg.PollInterval, errDelay: f.cfg.PollInterval}
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
	w.takeHead()
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
		w.quietAfterEmpty(wasWoken)
		w.errDelay = cfg.PollInterval
		w.woken = wasWoken && w.idle == cfg.PollInterval // one more look right after a wake-up
		d := w.idle
		w.idle = min(2*w.idle, cfg.MaxPollInterval)
		return w.pause(d)
	}
	w.errDelay, w.idle, w.emptyWakes = cfg.PollInterval, cfg.PollInterval, 0
	w.dels = make([]delivery, len(w.head)) // messages sent keep theirs (RowFromContext)
	return w.settle(w.sendRun())
}

// takeHead lets the last run's messages keep the payloads they took from its records
// (laneWorker.prepare): the records' buffers are dropped, so that the next read
// allocates new ones rather than reusing them. The record array itself is reused.
func (w *laneWorker) takeHead() {
	for i := range w.head {
		w.head[i].Headers, w.head[i].Body = nil, nil
	}
	w.dels = nil
}

// settle deletes the sent rows of the run (one fenced statement) and records the
// failures that ended its keys; false when the lane must stop. The lane's next head is
// the failed row first in lane order (smallest Seq): the lane waits until it is due (not at all when
// it was parked: the rows behind it may be due at once).
func (w *laneWorker) settle(res *runResult) bool {
	if len(res.sent) > 0 && !w.complete(res.sent, res.seqs) {
		return false
	}
	head := int64(-1)
	w.notBefore = time.Time{}
	for i := range res.fails {
		retryAt, ok := w.fail(&res.fails[i])
		if !ok {
			return false
		}
		if seq := res.fails[i].rec.Seq; head < 0 || seq < head {
			head, w.notBefore = seq, retryAt
		}
	}
	return !res.stop
}

// complete deletes the sent rows with the lease and counts them; false when the lease
// is gone (another forwarder owns the lane and sends them again).
func (w *laneWorker) complete(ids []outbox.ID, seqs []int64) bool {
	f := w.f
	return w.fenced("complete", func(ctx context.Context) (bool, error) {
		f.laneSem <- struct{}{}
		n, err := f.store.Complete(ctx, outbox.CompleteParams{IDs: ids, Seqs: seqs, Now: f.now(), Lane: w.lane, Lease: w.h.token})
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

// fail records the failed attempt of a row that ended its key's part of the run (or
// parks it) and returns when it is due again (zero when parked); ok is false when the
// lane must stop.
func (w *laneWorker) fail(res *rowFailure) (retryAt time.Time, ok bool) {
	f, cfg, rec := w.f, w.cfg, res.rec
	attempts := rec.Attempts + 1
	park := res.park || attempts >= cfg.MaxAttempts
	if !park {
		retryAt = f.now().Add(cfg.backoff(attempts))
	}
	ok = w.fenced("fail", func(ctx context.Context) (bool, error) {
		return f.store.Fail(ctx, outbox.FailParams{ID: rec.ID, Seq: rec.Seq, Now: f.now(), Error: res.reason, RetryAt: retryAt, Park: park, Lane: w.lane, Lease: w.h.token})
	})
	if !ok {
		return time.Time{}, false
	}
	f.countFailure(w.lane, park)
	if park {
		w.log("Row parked", nil, watermill.LogFields{"row_id": rec.ID.String(), "attempts": attempts, "reason": res.reason})
		if cfg.StopLaneOnPoison {
			f.stopLane(w.lane)
		}
	}
	return retryAt, true
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
		if d := time.Until(w.quietUntil); d > 0 {
			return w.pauseQuiet(d)
		}
	case <-w.h.release:
		return false
	case <-w.f.stopping:
		return false
	case <-w.h.ctx.Done():
		return false
	}
	return true
}

// quietAfterEmpty counts a read that found nothing; after the second such read in a
// row that followed a wake-up, wake-ups wait until PollInterval after it. A commit's
// own wake-up finds rows, or, when a second wake-up source repeats it, finds nothing
// once: neither waits.
func (w *laneWorker) quietAfterEmpty(wasWoken bool) {
	if !wasWoken {
		return
	}
	w.emptyWakes++
	if w.emptyWakes >= 2 {
		w.quietUntil = time.Now().Add(min(w.cfg.PollInterval, wakeQuietMax))
	}
}

// wakeQuietMax bounds the merging of wake-ups after reads that found nothing: with a
// long PollInterval a commit still reaches its lane within this.
const wakeQuietMax = 100 * time.Millisecond

// pauseQuiet waits d without taking wake-ups (they merge into the read after it);
// false when the lane must stop.
func (w *laneWorker) pauseQuiet(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-w.h.release:
	case <-w.f.stopping:
	case <-w.h.ctx.Done():
	}
	return false
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
