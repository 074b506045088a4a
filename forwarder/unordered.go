package forwarder

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
)

// completerCount is the number of goroutines that run the deletes and failures of
// unordered rows, so that the claimer never waits for them.
const completerCount = 2

// uBatch is one unordered claim: its token, expiry and the rows still in flight.
type uBatch struct {
	token   outbox.Token
	until   time.Time
	open    int         // emitted rows not yet acked or nacked
	waiting int         // claimed rows not emitted yet
	lost    bool        // a renewal found no live claim: emit nothing more of it
	acked   []outbox.ID // acked rows waiting for the coalesced delete
	renewAt time.Time   // wall time of the next renewal attempt after an error
}

type uResult struct {
	batch *uBatch
	d     *delivery
	acked bool
}

// storeJob is a delete (complete) or a failure of unordered rows, run by a completer.
type storeJob struct {
	complete *outbox.CompleteParams
	fail     *outbox.FailParams
	until    time.Time  // claim expiry: retrying after it is pointless
	window   *jobWindow // the claimer's window the job's rows still occupy; nil for none
}

// jobWindow counts the rows of one claimer that were acked or nacked but whose delete
// or failure has not landed yet. They stay in the claimer's window until then: a
// store that is slow or down must stop the claimer from sending more, or the rows
// whose deletes queue up (their claims expiring meanwhile) could all be sent again.
type jobWindow struct {
	rows atomic.Int64
	done chan struct{} // signalled (never blocking) when rows drop
}

func newJobWindow() *jobWindow { return &jobWindow{done: make(chan struct{}, 1)} }

func (w *jobWindow) add(n int) {
	if w != nil {
		w.rows.Add(int64(n))
	}
}

func (w *jobWindow) release(n int) {
	if w == nil {
		return
	}
	w.rows.Add(-int64(n))
	select {
	case w.done <- struct{}{}:
	default:
	}
}

// rows returns how many rows the job is about.
func (j storeJob) rows() int {
	if j.complete != nil {
		return len(j.complete.IDs)
	}
	return 1
}

// runUnordered is the claimer of unordered rows: it keeps up to InFlight messages in
// flight, coalesces acks into batched deletes, fails nacked rows with backoff and renews
// the claims of rows in flight.
func (f *Forwarder) runUnordered(wakeCh <-chan struct{}, window int) {
	defer f.emitters.Done()
	ctx := f.hardCtx
	cfg := &f.cfg
	results := make(chan uResult, window) // never blocks: at most window watchers
	batches := map[outbox.Token]*uBatch{}
	var (
		dst        []outbox.Record
		inFlight   int
		pending    int       // acks waiting for a delete
		flushAt    time.Time // wall time
		nextClaim  time.Time // wall time
		idle       = cfg.PollInterval
		errDelay   = cfg.PollInterval
		stopping   = f.stopping
		isStopping bool
		cur        cursor
		rt         renewTicker // renews the claims while the router is busy
	)
	counters := &f.counters[0]
	minClaim := max(min(cfg.ClaimBatch, window)/4, 1)
	jw := newJobWindow() // acked or nacked rows whose store update has not landed yet

	flush := func() {
		for tok, b := range batches {
			if len(b.acked) > 0 {
				f.submit(storeJob{
					complete: &outbox.CompleteParams{Token: tok, IDs: b.acked, Lane: outbox.Unordered},
					until:    b.until,
					window:   jw,
				})
				b.acked = nil
			}
			if b.open == 0 {
				delete(batches, tok)
			}
		}
		pending = 0
		flushAt = time.Time{}
	}

	handle := func(r uResult) {
		inFlight--
		counters.inFlight.Add(-1)
		f.reportInFlight(outbox.Unordered)
		b := r.batch
		b.open--
		if r.acked {
			b.acked = append(b.acked, r.d.row.ID)
			pending++
			if flushAt.IsZero() {
				flushAt = time.Now().Add(cfg.CompleteDelay)
			}
			counters.sent.Add(1)
			f.metrics.MessageSent(outbox.Unordered)
			return
		}
		fp := f.failureOf(r.d, b.token)
		f.submit(storeJob{fail: &fp, until: b.until, window: jw})
		if b.open == 0 && len(b.acked) == 0 {
			delete(batches, b.token)
		}
	}

	renew := func() {
		now := f.now()
		for _, b := range batches {
			if (b.open == 0 && b.waiting == 0) || b.until.Sub(now) >= cfg.ClaimTTL/2 || time.Now().Before(b.renewAt) {
				continue
			}
			until := now.Add(cfg.ClaimTTL)
			n, err := f.store.Renew(ctx, outbox.RenewParams{Token: b.token, Now: now, Until: until, Lane: outbox.Unordered})
			switch {
			case err != nil:
				f.logger.Error("Cannot renew claims of unordered rows in flight", err, nil)
				b.renewAt = time.Now().Add(cfg.PollInterval)
			case n == 0:
				f.logger.Info("Claims of unordered rows in flight expired; they may be sent twice", watermill.LogFields{"rows": b.open})
				b.lost = true
				b.until = until // nothing left to renew; stop trying
				b.renewAt = until
			default:
				b.until = until
			}
		}
	}

	for {
		if !isStopping && f.isStopping() {
			isStopping, stopping = true, nil
		}
		if isStopping && inFlight == 0 {
			flush()
			return
		}
		// Claim when the window has room for a useful batch (or is empty): a claim of a
		// handful of rows costs the same round trip as a full one.
		room := window - inFlight - pending - int(jw.rows.Load())
		canClaim := !isStopping && room > 0 && (inFlight == 0 || room >= minClaim)
		if canClaim && !time.Now().Before(nextClaim) {
			n := min(cfg.ClaimBatch, room)
			now := f.now()
			b := &uBatch{token: outbox.NewToken(), until: now.Add(cfg.ClaimTTL)}
			after := cur.next(cfg.PollInterval)
			recs, err := f.store.Claim(ctx, outbox.ClaimParams{
				Lane: outbox.Unordered, Limit: n, Now: now, Until: b.until, Token: b.token, After: after,
			}, dst)
			cur.advance(len(recs) == n, lastID(recs))
			switch {
			case err == nil && len(recs) == 0 && !after.IsZero():
				dst = recs
				continue // the rest of the backlog may sit behind the cursor: sweep at once
			case err != nil:
				f.logger.Error("Cannot claim unordered rows; backing off", err, watermill.LogFields{"retry_in": errDelay})
				nextClaim = time.Now().Add(errDelay)
				errDelay = min(2*errDelay, cfg.MaxPollInterval)
			case len(recs) == 0:
				dst = recs
				errDelay = cfg.PollInterval
				nextClaim = time.Now().Add(idle)
				idle = min(2*idle, cfg.MaxPollInterval)
			default:
				dst = recs
				errDelay, idle = cfg.PollInterval, cfg.PollInterval
				if len(recs) == n || !after.IsZero() {
					nextClaim = time.Time{} // more may be waiting (ahead of or behind the cursor)
				} else {
					nextClaim = time.Now().Add(cfg.PollInterval)
				}
				batches[b.token] = b
				b.waiting = len(recs)
				for i := range recs {
					if f.isStopping() {
						// Shutting down: give the rows not emitted yet back at once.
						f.releaseUnordered(b.token, recs[i:])
						b.waiting = 0
						break
					}
					if b.lost {
						// The batch's claims expired while the consumer was slow: these
						// rows are anyone's again; sending them here would duplicate.
						b.waiting = 0
						break
					}
					b.waiting--
					msg, d, reason := f.prepare(&recs[i])
					if reason != "" {
						f.parkClaimed(&recs[i], b.token, reason)
						continue
					}
					b.open++
					inFlight++
					counters.inFlight.Add(1)
					if !f.emit(ctx, msg, &rt, cfg.ClaimTTL/4, renew) {
						counters.inFlight.Add(-1)
						f.releaseUnordered(b.token, recs[i:])
						return
					}
					go f.watchUnordered(msg, d, b, results)
				}
				f.reportInFlight(outbox.Unordered)
				if b.open == 0 {
					delete(batches, b.token)
				}
				continue
			}
		}

		// Wait for a result, a wake-up, or the next deadline.
		var wait time.Duration = -1
		setWait := func(at time.Time) {
			d := time.Until(at)
			if d < 0 {
				d = 0
			}
			if wait < 0 || d < wait {
				wait = d
			}
		}
		if canClaim {
			setWait(nextClaim)
		}
		if pending > 0 {
			setWait(flushAt)
		}
		if len(batches) > 0 {
			// Check renewals at least every quarter of the claim TTL.
			setWait(time.Now().Add(cfg.ClaimTTL / 4))
		}
		var timer <-chan time.Time
		var t *time.Timer
		if wait >= 0 {
			t = time.NewTimer(wait)
			timer = t.C
		}
		select {
		case r := <-results:
			handle(r)
		drain:
			for {
				select {
				case r := <-results:
					handle(r)
				default:
					break drain
				}
			}
		case <-wakeCh:
			nextClaim = time.Time{}
			idle = cfg.PollInterval
		case <-jw.done: // store updates landed: the window may have room again
		case <-timer:
		case <-stopping:
			isStopping = true
			stopping = nil
		case <-f.abandon:
			if t != nil {
				t.Stop()
			}
			flush()
			return
		}
		if t != nil {
			t.Stop()
		}
		if pending > 0 && (pending >= cfg.ClaimBatch || !time.Now().Before(flushAt) || isStopping) {
			flush()
		}
		renew()
	}
}

// watchUnordered reports the outcome of one emitted message. One watcher per message,
// not per batch: a slow message must not hold back the reports (window room, deletes)
// of the messages emitted after it.
func (f *Forwarder) watchUnordered(msg *message.Message, d *delivery, b *uBatch, results chan<- uResult) {
	if acked, ok := f.watch(msg); ok {
		results <- uResult{batch: b, d: d, acked: acked}
	}
}

// prepare builds the message of a claimed row, or says why the row cannot be sent.
func (f *Forwarder) prepare(rec *outbox.Record) (*message.Message, *delivery, string) {
	if reason := f.invalidReason(rec); reason != "" {
		return nil, nil, reason
	}
	msg, d, err := f.buildMessage(rec)
	if err != nil {
		return nil, nil, err.Error()
	}
	return msg, d, ""
}

// releaseUnordered gives back the claims of unordered rows that were not emitted.
func (f *Forwarder) releaseUnordered(token outbox.Token, recs []outbox.Record) {
	ids := make([]outbox.ID, len(recs))
	for i := range recs {
		ids[i] = recs[i].ID
	}
	ctx, cancel := context.WithTimeout(f.hardCtx, f.cfg.LeaseTTL)
	defer cancel()
	if _, err := f.store.Release(ctx, outbox.ReleaseParams{Token: token, IDs: ids, Now: f.now(), Lane: outbox.Unordered}); err != nil {
		f.logger.Error("Cannot release claimed unordered rows (their claims expire)", err, watermill.LogFields{"rows": len(ids)})
	}
}

// parkClaimed parks an unordered row that cannot be sent (through a completer, which
// counts and logs it once the store has parked it).
func (f *Forwarder) parkClaimed(rec *outbox.Record, token outbox.Token, reason string) {
	f.submit(storeJob{fail: &outbox.FailParams{
		ID: rec.ID, Token: token, Now: f.now(), Error: reason, Park: true, Lane: outbox.Unordered,
	}, until: f.now().Add(f.cfg.ClaimTTL)})
}

func (f *Forwarder) countFailure(lane int, parked bool) {
	c := &f.counters[lane+1]
	c.failed.Add(1)
	f.metrics.MessageFailed(lane)
	if parked {
		c.parked.Add(1)
		f.metrics.MessageParked(lane)
	}
}

// submit queues a store job; after the shutdown deadline it is dropped (the claim
// expires and the row is sent again). The job's rows stay in its window until it ends.
func (f *Forwarder) submit(j storeJob) {
	j.window.add(j.rows())
	select {
	case f.jobs <- j:
	case <-f.abandon:
		j.window.release(j.rows())
	}
}

// runCompleters runs the deletes and failures of unordered rows until Close closes jobs.
func (f *Forwarder) runCompleters() {
	defer f.services.Done()
	var wg sync.WaitGroup
	for range completerCount {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range f.jobs {
				f.runJob(j)
				j.window.release(j.rows())
			}
		}()
	}
	wg.Wait()
}

// runJob retries a store job on errors until the claim it relies on has expired.
func (f *Forwarder) runJob(j storeJob) {
	delay := 20 * time.Millisecond
	if !f.now().Before(j.until) {
		return // the claim is gone: the store would change nothing
	}
	for {
		ctx, cancel := context.WithTimeout(f.hardCtx, f.cfg.ClaimTTL)
		var err error
		if c := j.complete; c != nil {
			c.Now = f.now()
			var n int
			n, err = f.store.Complete(ctx, *c)
			if err == nil && n < len(c.IDs) {
				f.logger.Info("Some acked rows were not deleted (claim expired); they will be sent again",
					watermill.LogFields{"acked": len(c.IDs), "deleted": n})
			}
		} else {
			p := j.fail
			p.Now = f.now() // RetryAt stays relative to the failure
			var ok bool
			ok, err = f.store.Fail(ctx, *p)
			switch {
			case err == nil && ok:
				f.countFailed(p) // counted once recorded, as on the other paths
			case err == nil:
				f.logger.Debug("Failed row no longer claimed (claim expired)", watermill.LogFields{"row_id": p.ID.String()})
			}
		}
		cancel()
		if err == nil {
			return
		}
		if !f.now().Before(j.until) {
			f.logger.Error("Giving up a store update: the claim has expired", err, nil)
			return
		}
		f.logger.Error("Store update failed; retrying", err, watermill.LogFields{"retry_in": delay})
		select {
		case <-time.After(delay):
		case <-f.abandon:
			return
		}
		delay = min(2*delay, time.Second)
	}
}
