package forwarder

import (
	"context"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
)

// uBatch is one unordered claim: its token, expiry and the rows still in flight.
type uBatch struct {
	token   outbox.Token
	until   time.Time
	open    int         // emitted rows not yet acked or nacked
	waiting int         // claimed rows not emitted yet
	lost    bool        // a renewal found no live claim: emit nothing more of it
	acked   []outbox.ID // acked rows waiting for the coalesced delete
	renewAt time.Time   // wall time of the next renewal attempt after an error
	ids     []outbox.ID // the claimed rows, which renewals name (no index on claim tokens)
}

type uResult struct {
	batch *uBatch
	d     *delivery
	acked bool
}

// tokenClaimer is a claim loop of unordered rows with token claims (Config.TokenClaims):
// it keeps up to its window of messages in flight, coalesces acks into batched deletes
// and fails nacked rows (both through the completer), and renews the claims of rows in
// flight. One goroutine runs it (run); the watchers of its messages report on results.
type tokenClaimer struct {
	f        *Forwarder
	cfg      *Config
	ctx      context.Context
	wake     <-chan struct{}
	window   int
	minClaim int // the smallest claim worth its round trip while messages are in flight
	counters *laneCounters
	results  chan uResult // never blocks: at most window watchers
	batches  map[outbox.Token]*uBatch
	jw       *jobWindow // acked or nacked rows whose store update has not landed yet

	dst        []outbox.Record
	inFlight   int
	pending    int       // acks waiting for a delete
	flushAt    time.Time // wall time
	nextClaim  time.Time // wall time
	idle       time.Duration
	errDelay   time.Duration
	stopping   <-chan struct{} // nil once seen
	isStopping bool
	cur        cursor
	rt         renewTicker // renews the claims while the router is busy
}

func newTokenClaimer(f *Forwarder, wake <-chan struct{}, window int) *tokenClaimer {
	cfg := &f.cfg
	return &tokenClaimer{
		f: f, cfg: cfg, ctx: f.hardCtx, wake: wake, window: window,
		minClaim: max(min(cfg.ClaimBatch, window)/4, 1),
		counters: &f.counters[0],
		results:  make(chan uResult, window),
		batches:  map[outbox.Token]*uBatch{},
		jw:       newJobWindow(),
		idle:     cfg.PollInterval, errDelay: cfg.PollInterval,
		stopping: f.stopping,
	}
}

// run claims, emits and settles until Close has stopped it and its messages are
// settled, or the shutdown deadline abandons them.
func (c *tokenClaimer) run() {
	for {
		if !c.isStopping && c.f.isStopping() {
			c.isStopping, c.stopping = true, nil
		}
		if c.isStopping && c.inFlight == 0 {
			c.flush()
			return
		}
		// Claim when the window has room for a useful batch (or is empty): a claim of a
		// handful of rows costs the same round trip as a full one.
		room := c.window - c.inFlight - c.pending - int(c.jw.rows.Load())
		canClaim := !c.isStopping && room > 0 && (c.inFlight == 0 || room >= c.minClaim)
		if canClaim && !time.Now().Before(c.nextClaim) {
			again, ok := c.claim(min(c.cfg.ClaimBatch, room))
			if !ok {
				return
			}
			if again {
				continue
			}
		}
		if !c.wait(canClaim) {
			return
		}
	}
}

// claim claims up to n rows and emits them. again reports that the loop should go on
// at once (rows were emitted, or the cursor may hide the rest of the backlog); ok is
// false when the forwarder abandoned its messages.
func (c *tokenClaimer) claim(n int) (again, ok bool) {
	cfg := c.cfg
	now := c.f.now()
	b := &uBatch{token: outbox.NewToken(), until: now.Add(cfg.ClaimTTL)}
	after := c.cur.next(cfg.PollInterval)
	recs, err := c.f.store.Claim(c.ctx, outbox.ClaimParams{
		Lane: outbox.Unordered, Limit: n, Now: now, Until: b.until, Token: b.token, After: after,
	}, c.dst)
	c.cur.advance(len(recs) == n, lastID(recs))
	switch {
	case err == nil && len(recs) == 0 && !after.IsZero():
		c.dst = recs
		return true, true // the rest of the backlog may sit behind the cursor: sweep at once
	case err != nil:
		c.f.logger.Error("Cannot claim unordered rows; backing off", err, watermill.LogFields{"retry_in": c.errDelay})
		c.nextClaim = time.Now().Add(c.errDelay)
		c.errDelay = min(2*c.errDelay, cfg.MaxPollInterval)
		return false, true
	case len(recs) == 0:
		c.dst = recs
		c.errDelay = cfg.PollInterval
		c.nextClaim = time.Now().Add(c.idle)
		c.idle = min(2*c.idle, cfg.MaxPollInterval)
		return false, true
	}
	c.dst = recs
	c.errDelay, c.idle = cfg.PollInterval, cfg.PollInterval
	if len(recs) == n || !after.IsZero() {
		c.nextClaim = time.Time{} // more may be waiting (ahead of or behind the cursor)
	} else {
		c.nextClaim = time.Now().Add(cfg.PollInterval)
	}
	return true, c.emitBatch(b, recs)
}

// emitBatch hands the claimed rows of b to the router, one watcher per message; false
// when the forwarder abandoned its messages meanwhile.
func (c *tokenClaimer) emitBatch(b *uBatch, recs []outbox.Record) bool {
	f := c.f
	c.batches[b.token] = b
	b.waiting = len(recs)
	b.ids = recordIDs(recs)
	for i := range recs {
		if f.isStopping() {
			// Shutting down: give the rows not emitted yet back at once.
			f.releaseUnordered(b.token, recs[i:])
			b.waiting = 0
			break
		}
		if b.lost {
			// The batch's claims expired while the consumer was slow: these rows are
			// anyone's again; sending them here would duplicate.
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
		c.inFlight++
		c.counters.inFlight.Add(1)
		if !f.emit(c.ctx, msg, &c.rt, c.cfg.ClaimTTL/4, c.renew) {
			c.counters.inFlight.Add(-1)
			f.releaseUnordered(b.token, recs[i:])
			return false
		}
		go c.watch(msg, d, b)
	}
	f.reportInFlight(outbox.Unordered)
	if b.open == 0 {
		delete(c.batches, b.token)
	}
	return true
}

// watch reports the outcome of one emitted message. One watcher per message, not per
// batch: a slow message must not hold back the reports (window room, deletes) of the
// messages emitted after it.
func (c *tokenClaimer) watch(msg *message.Message, d *delivery, b *uBatch) {
	switch await(msg, nil, c.f.abandon) {
	case outcomeAcked:
		c.results <- uResult{batch: b, d: d, acked: true}
	case outcomeNacked:
		c.results <- uResult{batch: b, d: d}
	}
}

// wait waits for a result, a wake-up, a store update landing or the next deadline, then
// flushes the acks that are due and renews the claims that need it. It reports false
// when the forwarder abandoned its messages (after flushing what it could).
func (c *tokenClaimer) wait(canClaim bool) bool {
	var timer <-chan time.Time
	if d, ok := c.nextDeadline(canClaim); ok {
		t := time.NewTimer(d)
		defer t.Stop()
		timer = t.C
	}
	select {
	case r := <-c.results:
		c.handle(r)
		c.drainResults()
	case <-c.wake:
		c.nextClaim = time.Time{}
		c.idle = c.cfg.PollInterval
	case <-c.jw.done: // store updates landed: the window may have room again
	case <-timer:
	case <-c.stopping:
		c.isStopping, c.stopping = true, nil
	case <-c.f.abandon:
		c.flush()
		return false
	}
	if c.pending > 0 && (c.pending >= c.cfg.ClaimBatch || !time.Now().Before(c.flushAt) || c.isStopping) {
		c.flush()
	}
	c.renew()
	return true
}

// nextDeadline is how long to wait at most: until the next claim (when one may be
// made), the coalesced delete, or the next renewal check; ok is false for no deadline.
func (c *tokenClaimer) nextDeadline(canClaim bool) (wait time.Duration, ok bool) {
	wait = -1
	setWait := func(at time.Time) {
		d := max(time.Until(at), 0)
		if wait < 0 || d < wait {
			wait = d
		}
	}
	if canClaim {
		setWait(c.nextClaim)
	}
	if c.pending > 0 {
		setWait(c.flushAt)
	}
	if len(c.batches) > 0 {
		// Check renewals at least every quarter of the claim TTL.
		setWait(time.Now().Add(c.cfg.ClaimTTL / 4))
	}
	return wait, wait >= 0
}

// drainResults handles the results already reported, without waiting.
func (c *tokenClaimer) drainResults() {
	for {
		select {
		case r := <-c.results:
			c.handle(r)
		default:
			return
		}
	}
}

// handle settles one message: an ack joins its batch's coalesced delete, a nack is
// failed through the completer.
func (c *tokenClaimer) handle(r uResult) {
	f := c.f
	c.inFlight--
	c.counters.inFlight.Add(-1)
	f.reportInFlight(outbox.Unordered)
	b := r.batch
	b.open--
	if r.acked {
		b.acked = append(b.acked, r.d.row.ID)
		c.pending++
		if c.flushAt.IsZero() {
			c.flushAt = time.Now().Add(c.cfg.CompleteDelay)
		}
		c.counters.sent.Add(1)
		f.metrics.MessageSent(outbox.Unordered)
		return
	}
	fp := f.failureOf(r.d, b.token)
	f.submit(storeJob{fail: &fp, until: b.until, window: c.jw})
	if b.open == 0 && len(b.acked) == 0 {
		delete(c.batches, b.token)
	}
}

// flush submits the coalesced deletes of every batch and forgets the settled batches.
func (c *tokenClaimer) flush() {
	for tok, b := range c.batches {
		if len(b.acked) > 0 {
			c.f.submit(storeJob{
				complete: &outbox.CompleteParams{Token: tok, IDs: b.acked, Lane: outbox.Unordered},
				until:    b.until,
				window:   c.jw,
			})
			b.acked = nil
		}
		if b.open == 0 {
			delete(c.batches, tok)
		}
	}
	c.pending = 0
	c.flushAt = time.Time{}
}

// renew extends the claims of batches with rows in flight or waiting to be emitted once
// less than half of ClaimTTL is left.
func (c *tokenClaimer) renew() {
	f, cfg := c.f, c.cfg
	now := f.now()
	for _, b := range c.batches {
		if (b.open == 0 && b.waiting == 0) || b.until.Sub(now) >= cfg.ClaimTTL/2 || time.Now().Before(b.renewAt) {
			continue
		}
		until := now.Add(cfg.ClaimTTL)
		n, err := f.store.Renew(c.ctx, outbox.RenewParams{Token: b.token, IDs: b.ids, Now: now, Until: until, Lane: outbox.Unordered})
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

// prepare builds the message of a claimed row, or says why the row cannot be sent.
func (f *Forwarder) prepare(rec *outbox.Record) (*message.Message, *delivery, string) {
	return f.prepareRow(rec, false, nil)
}

// prepareRow is prepare with buildMessage's owned and d.
func (f *Forwarder) prepareRow(rec *outbox.Record, owned bool, d *delivery) (*message.Message, *delivery, string) {
	if reason := f.invalidReason(rec); reason != "" {
		return nil, nil, reason
	}
	msg, d, err := f.buildMessage(rec, owned, d)
	if err != nil {
		return nil, nil, err.Error()
	}
	return msg, d, ""
}

// releaseUnordered gives back the claims of unordered rows that were not emitted.
func (f *Forwarder) releaseUnordered(token outbox.Token, recs []outbox.Record) {
	ids := recordIDs(recs)
	ctx, cancel := context.WithTimeout(f.hardCtx, f.cfg.LeaseTTL)
	defer cancel()
	if _, err := f.store.Release(ctx, outbox.ReleaseParams{Token: token, IDs: ids, Now: f.now(), Lane: outbox.Unordered}); err != nil {
		f.logger.Error("Cannot release claimed unordered rows (their claims expire)", err, watermill.LogFields{"rows": len(ids)})
	}
}

// recordIDs returns the IDs of recs, in order.
func recordIDs(recs []outbox.Record) []outbox.ID {
	ids := make([]outbox.ID, len(recs))
	for i := range recs {
		ids[i] = recs[i].ID
	}
	return ids
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
