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

// emitted is a message handed to the router (or published by Run) and its row.
type emitted struct {
	msg *message.Message
	d   *delivery
}

// openBatch is a locked batch whose rows have been emitted and whose outcomes are
// awaited; settle finishes it.
type openBatch struct {
	lb       outbox.LockedBatch
	rows     int
	sent     []emitted           // in emission order; settle awaits them in turn
	open     int                 // emitted rows whose outcome has not been counted
	done     []outbox.ID         // acked rows, deleted when the batch finishes
	failed   []outbox.FailParams // rows parked before they were emitted, then nacked ones
	deadline time.Time
	direct   *directSend // Run's publishing of sent; nil through a router
}

// lockHoldMax bounds how long a locked batch keeps its row locks (and its pooled
// connection) for its slowest messages: after it the rows still in flight are handed over
// to an ordinary claim (LockedBatch.Finish with Claim), the rest of the batch commits, and
// those rows are renewed, completed and failed through the Store like token claims.
const lockHoldMax = time.Second

// lockClaimer is a claim loop of unordered rows with row locks (the default claims,
// outbox.BatchLocker). It locks a batch, emits its rows and, while their outcomes are
// awaited, locks and emits the next one: up to window/ClaimBatch batches (each an open
// transaction on its own pooled connection) are open at once, so the database works on
// one batch while the router sends another. Each batch is settled by a goroutine of its
// own and finished in its own transaction once all its rows are acked or nacked.
type lockClaimer struct {
	f      *Forwarder
	cfg    *Config
	bl     outbox.BatchLocker
	wake   <-chan struct{}
	limit  int           // rows per batch
	window int           // rows in flight at most (Config.InFlight)
	slots  chan struct{} // one per open batch
	// handed counts the rows handed over to a claim and still in flight (slow or hung
	// messages): each holds one place of the window, never its batch's slot.
	handed   atomic.Int64
	settling sync.WaitGroup
	idle     time.Duration
	errDelay time.Duration
	cur      cursor
	// woken says the last batch followed a wake-up; emptyWakes counts such batches in a
	// row that found nothing, and from the second on wake-ups before quietUntil merge
	// into one batch then (a flood of wake-ups without rows).
	woken      bool
	emptyWakes int
	quietUntil time.Time
	rt         renewTicker
	// recs is the array the batches' records are read into, one batch after another:
	// lockAndEmit clears them when it returns.
	recs []outbox.Record
}

func newLockClaimer(f *Forwarder, bl outbox.BatchLocker, wake <-chan struct{}, window int) *lockClaimer {
	cfg := &f.cfg
	limit := min(cfg.ClaimBatch, window)
	return &lockClaimer{
		f: f, cfg: cfg, bl: bl, wake: wake, limit: limit, window: window,
		slots: make(chan struct{}, max(window/limit, 1)),
		idle:  cfg.PollInterval, errDelay: cfg.PollInterval,
	}
}

// run locks and emits batches until Close starts, then waits for the open batches to
// settle.
func (c *lockClaimer) run() {
	defer c.settling.Wait()
	for {
		if c.f.isStopping() {
			return
		}
		select {
		case c.slots <- struct{}{}:
		case <-c.f.stopping:
			return
		}
		limit := c.batchLimit()
		if limit == 0 { // the window is taken by slow messages handed over to claims
			<-c.slots
			if !c.sleep(c.cfg.PollInterval) {
				return
			}
			continue
		}
		after := c.cur.next(c.cfg.PollInterval)
		ob, n, last, err := c.lockAndEmit(after, limit)
		if ob != nil {
			c.settling.Add(1)
			go c.settleAndFree(ob)
		} else {
			<-c.slots
		}
		c.cur.advance(n == limit, last)
		c.countWake(n == 0 && err == nil)
		delay, again := c.nextDelay(n, limit, after, err)
		if again {
			continue
		}
		if !c.sleep(delay) {
			return
		}
	}
}

// batchLimit is how many rows the next batch may lock: ClaimBatch, less the places of
// the window that rows handed over to claims hold (0: none left).
func (c *lockClaimer) batchLimit() int {
	return max(min(c.limit, c.window-int(c.handed.Load())), 0)
}

// nextDelay says how long to wait before the next batch after one of n rows locked
// (of limit) after the cursor, or again for at once.
func (c *lockClaimer) nextDelay(n, limit int, after outbox.ID, err error) (delay time.Duration, again bool) {
	cfg := c.cfg
	switch {
	case err == nil && n < limit && !after.IsZero():
		return 0, true // the rest of the backlog may sit behind the cursor: sweep at once
	case err != nil:
		c.f.logger.Error("Locked batch of unordered rows failed; backing off (its rows are released by the rollback)", err,
			watermill.LogFields{"retry_in": c.errDelay})
		delay = c.errDelay
		c.errDelay = min(2*c.errDelay, cfg.MaxPollInterval)
		return delay, false
	case n == 0:
		c.errDelay = cfg.PollInterval
		delay = c.idle
		c.idle = min(2*c.idle, cfg.MaxPollInterval)
		return delay, false
	}
	c.errDelay, c.idle = cfg.PollInterval, cfg.PollInterval
	if n == limit {
		return 0, true // more may be waiting
	}
	return cfg.PollInterval, false
}

// sleep waits delay or a wake-up (which resets the idle backoff); false when Close
// started.
func (c *lockClaimer) sleep(delay time.Duration) bool {
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.wake:
		c.idle, c.woken = c.cfg.PollInterval, true
		if d := time.Until(c.quietUntil); d > 0 {
			return c.sleepQuiet(d)
		}
	case <-c.f.stopping:
		return false
	}
	return true
}

// countWake counts a batch that a wake-up led to and that found nothing (empty); after
// the second in a row, wake-ups wait until min(PollInterval, wakeQuietMax) after it.
func (c *lockClaimer) countWake(empty bool) {
	switch {
	case !c.woken:
	case empty:
		if c.emptyWakes++; c.emptyWakes >= 2 {
			c.quietUntil = time.Now().Add(min(c.cfg.PollInterval, wakeQuietMax))
		}
	default:
		c.emptyWakes = 0
	}
	c.woken = false
}

// sleepQuiet waits d without taking wake-ups; false when Close started.
func (c *lockClaimer) sleepQuiet(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.f.stopping:
		return false
	}
}

// settleAndFree settles a batch and frees its slot.
func (c *lockClaimer) settleAndFree(ob *openBatch) {
	defer c.settling.Done()
	defer func() { <-c.slots }()
	if err := c.settle(ob); err != nil {
		c.f.logger.Error("Finishing a locked batch of unordered rows failed (its rows are released by the rollback and sent again)", err,
			watermill.LogFields{"rows": ob.rows})
	}
}

// lockAndEmit locks up to limit rows after the cursor and emits them. It returns the
// batch to settle (nil when nothing is left to finish), the number of rows it locked and
// the last one's ID.
func (c *lockClaimer) lockAndEmit(after outbox.ID, limit int) (*openBatch, int, outbox.ID, error) {
	f, cfg := c.f, c.cfg
	lb, err := c.bl.LockBatch(f.hardCtx, outbox.LockParams{Limit: limit, Now: f.now(), After: after, Dst: c.recs})
	if err != nil {
		return nil, 0, outbox.ID{}, err
	}
	recs := lb.Records()
	if len(recs) == 0 {
		if err := lb.Rollback(); err != nil {
			f.logger.Debug("Rollback of an empty locked batch failed", watermill.LogFields{"error": err.Error()})
		}
		return nil, 0, outbox.ID{}, nil
	}
	last := lastID(recs)
	// The next batch is read into the same array (c.recs). Once the messages are built
	// the records are cleared, on every return: the next read must not reuse a buffer
	// a message holds (a store may), and the rows' other buffers can go now rather
	// than when the batch finishes (less for the GC to mark).
	defer func() {
		clear(recs)
		c.recs = recs
	}()
	// The batch's slowest message holds every lock of the batch: ClaimTTL bounds it.
	ob := &openBatch{lb: lb, rows: len(recs), deadline: time.Now().Add(cfg.ClaimTTL),
		sent: make([]emitted, 0, len(recs)), done: make([]outbox.ID, 0, len(recs))}
	counters := &f.counters[0]
	ds := make([]delivery, len(recs)) // one allocation for the batch's deliveries
	for i := range recs {
		if f.isStopping() || time.Now().After(ob.deadline) {
			break // rows not emitted stay unchanged: the commit releases them
		}
		// A locked batch's records are the caller's (outbox.LockedBatch.Records): the
		// payload is taken, not copied.
		msg, d, reason := f.prepareRow(&recs[i], true, &ds[i])
		if reason != "" {
			// Parked in the batch's transaction; counted and logged once it commits.
			ob.failed = append(ob.failed, outbox.FailParams{ID: recs[i].ID, Now: f.now(), Error: reason, Park: true, Lane: outbox.Unordered})
			continue
		}
		ob.open++
		counters.inFlight.Add(1)
		if f.direct {
			toTarget(msg, d)
			ob.sent = append(ob.sent, emitted{msg: msg, d: d})
			continue // published below, with the rest of the batch
		}
		if !f.emit(f.handBack, msg, &c.rt, cfg.ClaimTTL, func() {}) {
			ob.open-- // never handed over
			counters.inFlight.Add(-1)
			c.rollback(ob, "Shutting down: locked batch rolled back before the deadline; its rows are eligible again")
			return nil, len(recs), last, nil
		}
		ob.sent = append(ob.sent, emitted{msg: msg, d: d})
	}
	f.reportInFlight(outbox.Unordered)
	if f.direct {
		// Published by a goroutine of its own: a call that never returns must not keep
		// the batch's settle from its hold time and shutdown deadline.
		ob.direct = newDirectSend(f, ob.sent)
		go ob.direct.send()
	}
	return ob, len(recs), last, nil
}

// rollback gives up a batch: its rows become eligible again unchanged.
func (c *lockClaimer) rollback(ob *openBatch, why string) {
	f := c.f
	if ob.open > 0 {
		f.counters[0].inFlight.Add(int64(-ob.open))
		f.reportInFlight(outbox.Unordered)
		ob.open = 0
	}
	if err := ob.lb.Rollback(); err != nil {
		f.logger.Error("Rollback of a locked batch failed (the connection's end releases the locks)", err, nil)
	}
	f.logger.Info(why, watermill.LogFields{"rows": ob.rows})
}

// settle waits for the outcomes of a batch's emitted rows (in emission order: all of
// them are needed before the batch can finish, so one waiter per batch does, not one
// goroutine per message), then deletes the acked rows and records the failures in the
// batch's transaction. Rows still in flight after the hold time are handed over to a
// claim and settled by settleClaimed.
func (c *lockClaimer) settle(ob *openBatch) error {
	rest, ok := c.awaitBatch(ob)
	if !ok {
		return nil // rolled back at shutdown
	}
	// Every outcome is counted: the messages may go while the batch finishes.
	ob.sent, ob.direct = nil, nil
	return c.finish(ob, rest)
}

// awaitBatch records the outcomes of a batch's emitted rows until all are in or the hold
// time runs out; then it returns the rows still in flight (to be handed over to a
// claim). ok is false when the batch was rolled back for the shutdown deadline.
func (c *lockClaimer) awaitBatch(ob *openBatch) (rest []emitted, ok bool) {
	f := c.f
	timer := time.NewTimer(min(lockHoldMax, c.cfg.ClaimTTL/4))
	defer timer.Stop()
	hold := timer.C
	awaited := ob.sent
	if ds := ob.direct; ds != nil {
		o, n := c.awaitDirect(ds, &hold)
		if o == outcomeStopped {
			c.rollback(ob, "Shutting down: locked batch rolled back before the deadline; its acked rows may be sent again")
			return nil, false
		}
		// sent[:n] went out in send's own calls (their messages dropped, their outcomes
		// marked); the rest, when the settle took over, are awaited on their messages.
		awaited = c.recordMarked(ob, ds.marks[:n])
		if n < len(ob.sent) {
			awaited = ob.sent[n:]
		}
		if o == outcomeTicked {
			return c.sweep(ob, awaited), true
		}
	}
	for i := 0; i < len(awaited); i++ {
		e := awaited[i]
		switch await(e.msg, hold, f.handBack.Done()) {
		case outcomeAcked:
			c.record(ob, e, true)
		case outcomeNacked:
			c.record(ob, e, false)
		case outcomeTicked: // the hold time ran out
			if f.isStopping() {
				// Shutting down: keep the locks; if the messages do not finish until
				// shortly before the deadline (handBack) the rollback makes the rows
				// eligible again at once.
				hold = nil
				i--
				continue
			}
			return c.sweep(ob, awaited[i:]), true
		case outcomeStopped:
			// Rolled back in the batch's own transaction before the deadline cancels its
			// context (which would roll it back asynchronously, after Close returned).
			c.rollback(ob, "Shutting down: locked batch rolled back before the deadline; its acked rows may be sent again")
			return nil, false
		}
	}
	return nil, true
}

// awaitDirect waits until Run's publishing of a batch has made or started every call
// (directSend.done): it returns outcomeAcked and the batch's length then, and the
// outcomes of the calls send made itself can be read from its marks. When those calls
// stall, or the hold time runs out first (while Close has not started: after that the
// batch keeps its locks until the forwarder hands its rows back), it takes the
// publishing over (directSend.takeOver) and returns outcomePending or outcomeTicked
// with the number of leading messages whose outcomes are marked. It returns
// outcomeStopped when the forwarder hands its rows back.
func (c *lockClaimer) awaitDirect(ds *directSend, hold *<-chan time.Time) (outcome, int) {
	stall := time.NewTimer(directStallMax)
	defer stall.Stop()
	for {
		select {
		case <-ds.done:
			return outcomeAcked, len(ds.sent)
		case <-stall.C:
			return outcomePending, ds.takeOver()
		case <-*hold:
			if c.f.isStopping() {
				*hold = nil
				continue
			}
			return outcomeTicked, ds.takeOver()
		case <-c.f.handBack.Done():
			return outcomeStopped, 0
		}
	}
}

// sweep records the outcomes already in among es and returns the rows still in flight.
func (c *lockClaimer) sweep(ob *openBatch, es []emitted) (rest []emitted) {
	for _, e := range es {
		switch peek(e.msg) {
		case outcomeAcked:
			c.record(ob, e, true)
		case outcomeNacked:
			c.record(ob, e, false)
		default:
			rest = append(rest, e)
		}
	}
	return rest
}

// recordMarked records the outcomes Run's publishing marked (directSend.marks) with
// one update of the counters, and returns the batch's rows whose outcomes are still
// to be awaited (those of calls started concurrently), in emission order.
func (c *lockClaimer) recordMarked(ob *openBatch, marks []outcome) (pending []emitted) {
	f := c.f
	settled, acked := 0, 0
	for i, m := range marks {
		e := ob.sent[i]
		switch m {
		case outcomeAcked:
			ob.done = append(ob.done, e.d.row.ID)
			f.metrics.MessageSent(outbox.Unordered)
			acked++
		case outcomeNacked:
			ob.failed = append(ob.failed, f.failureOf(e.d, outbox.Token{}))
		default:
			pending = append(pending, e)
			continue
		}
		settled++
	}
	ob.open -= settled
	f.counters[0].inFlight.Add(int64(-settled))
	f.counters[0].sent.Add(uint64(acked))
	return pending
}

// record counts the outcome of one of a batch's rows and keeps it for the batch's
// transaction.
func (c *lockClaimer) record(ob *openBatch, e emitted, acked bool) {
	f := c.f
	ob.open--
	f.counters[0].inFlight.Add(-1)
	if acked {
		ob.done = append(ob.done, e.d.row.ID)
		f.counters[0].sent.Add(1)
		f.metrics.MessageSent(outbox.Unordered)
		return
	}
	ob.failed = append(ob.failed, f.failureOf(e.d, outbox.Token{}))
}

// finish deletes the acked rows, records the failures and hands rest over to a claim,
// all in the batch's transaction, then settles rest through settleClaimed.
func (c *lockClaimer) finish(ob *openBatch, rest []emitted) error {
	f, cfg := c.f, c.cfg
	f.reportInFlight(outbox.Unordered)
	p := outbox.FinishParams{Done: ob.done, Failed: ob.failed}
	if len(rest) > 0 {
		p.Claim, p.Token, p.Until = rowIDs(rest), outbox.NewToken(), f.now().Add(cfg.ClaimTTL)
	}
	fctx, cancel := context.WithTimeout(f.hardCtx, cfg.ClaimTTL)
	defer cancel()
	if err := ob.lb.Finish(fctx, p); err != nil {
		_ = ob.lb.Rollback()
		if len(rest) > 0 {
			f.counters[0].inFlight.Add(int64(-len(rest)))
			f.reportInFlight(outbox.Unordered)
		}
		return err
	}
	// Counted only now: a batch that rolls back recorded no failure.
	for i := range p.Failed {
		f.countFailed(&p.Failed[i])
	}
	if len(rest) > 0 {
		// Settled apart, so that the batch's slot is free at once: slow or hung messages
		// hold their claims and places of the window, not the next batches.
		f.logger.Debug("Slow messages of a locked batch handed over to a claim", watermill.LogFields{"rows": len(rest)})
		c.handed.Add(int64(len(rest)))
		c.settling.Add(1)
		go func() {
			defer c.settling.Done()
			c.settleClaimed(rest, p.Token, p.Until)
		}()
	}
	return nil
}

// settleClaimed waits for the outcomes of handed-over rows, renewing their claim while
// they wait, and completes or fails each through the completers.
func (c *lockClaimer) settleClaimed(rest []emitted, token outbox.Token, until time.Time) {
	f := c.f
	renew := time.NewTicker(c.cfg.ClaimTTL / 4)
	defer renew.Stop()
	for i := 0; i < len(rest); i++ {
		e := rest[i]
		switch await(e.msg, renew.C, f.handBack.Done()) {
		case outcomeAcked:
			c.settledClaimed()
			f.counters[0].sent.Add(1)
			f.metrics.MessageSent(outbox.Unordered)
			f.submit(storeJob{complete: &outbox.CompleteParams{Token: token, IDs: []outbox.ID{e.d.row.ID}, Lane: outbox.Unordered}, until: until})
		case outcomeNacked:
			c.settledClaimed()
			fp := f.failureOf(e.d, token)
			f.submit(storeJob{fail: &fp, until: until})
		case outcomeTicked:
			until = c.renewClaimed(rest[i:], token, until)
			i-- // await the same row again
		case outcomeStopped:
			c.abandonClaimed(rest[i:], token)
			return
		}
	}
}

// settledClaimed takes a handed-over row out of the in-flight gauge and the window.
func (c *lockClaimer) settledClaimed() {
	c.handed.Add(-1)
	c.f.counters[0].inFlight.Add(-1)
	c.f.reportInFlight(outbox.Unordered)
}

// renewClaimed extends the claim of the handed-over rows still in flight and returns
// the claim's expiry.
func (c *lockClaimer) renewClaimed(rest []emitted, token outbox.Token, until time.Time) time.Time {
	f, cfg := c.f, c.cfg
	ids := rowIDs(rest)
	now := f.now()
	next := now.Add(cfg.ClaimTTL)
	ctx, cancel := context.WithTimeout(f.hardCtx, cfg.ClaimTTL/4)
	defer cancel()
	n, err := f.store.Renew(ctx, outbox.RenewParams{Token: token, IDs: ids, Now: now, Until: next, Lane: outbox.Unordered})
	switch {
	case err != nil:
		f.logger.Error("Cannot renew the claims of slow unordered rows", err, nil)
		return until
	case n < len(ids):
		f.logger.Info("Claims of slow unordered rows expired; they may be sent twice", watermill.LogFields{"rows": len(ids) - n})
	}
	return next
}

// abandonClaimed settles handed-over rows still open shortly before the shutdown
// deadline (Forwarder.handBack), in one try that ends at the deadline, so that Close
// stays within ShutdownTimeout: rows whose messages were acked meanwhile are deleted,
// the others' claims are given back so that another forwarder takes them at once. What
// the try does not finish, the claims' expiry does (the rows are sent again).
func (c *lockClaimer) abandonClaimed(rest []emitted, token outbox.Token) {
	f := c.f
	counters := &f.counters[0]
	counters.inFlight.Add(int64(-len(rest)))
	c.handed.Add(int64(-len(rest)))
	f.reportInFlight(outbox.Unordered)
	var acked, open []outbox.ID
	for _, e := range rest {
		if peek(e.msg) == outcomeAcked { // acked and published (ackedOutcome)
			acked = append(acked, e.d.row.ID)
			counters.sent.Add(1)
			f.metrics.MessageSent(outbox.Unordered)
		} else {
			open = append(open, e.d.row.ID)
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), f.closeDeadline)
	defer cancel()
	now := f.now()
	if len(acked) > 0 {
		if _, err := f.store.Complete(ctx, outbox.CompleteParams{Token: token, IDs: acked, Now: now, Lane: outbox.Unordered}); err != nil {
			f.logger.Error("Cannot delete acked slow unordered rows at shutdown (they are sent again)", err, watermill.LogFields{"rows": len(acked)})
		}
	}
	if len(open) > 0 {
		if _, err := f.store.Release(ctx, outbox.ReleaseParams{Token: token, IDs: open, Now: now, Lane: outbox.Unordered}); err != nil {
			f.logger.Error("Cannot release the claims of slow unordered rows (they expire)", err, watermill.LogFields{"rows": len(open)})
		}
	}
}

// failureOf is the failure record of a nacked unordered row: the next attempt after the
// backoff, or parked after MaxAttempts.
func (f *Forwarder) failureOf(d *delivery, token outbox.Token) outbox.FailParams {
	cfg := &f.cfg
	attempts := d.row.Attempts + 1
	now := f.now()
	return outbox.FailParams{
		ID: d.row.ID, Token: token, Now: now, Error: d.failure(),
		RetryAt: now.Add(cfg.backoff(attempts)), Park: attempts >= cfg.MaxAttempts, Lane: outbox.Unordered,
	}
}

// countFailed counts a failure of an unordered row that the store has recorded, and
// logs it when it parked the row. Every path counts only what the store recorded: a
// locked batch after its commit, a token claim after its completer's Fail.
func (f *Forwarder) countFailed(fp *outbox.FailParams) {
	f.countFailure(outbox.Unordered, fp.Park)
	if fp.Park {
		f.logger.Error("Row parked", nil, watermill.LogFields{"row_id": fp.ID.String(), "last_error": fp.Error})
	}
}

// cursor walks an unordered backlog: after a full batch the next claim starts past its
// last row, so the database does not step again over rows just claimed or deleted; at
// least every sweep interval, and after a batch that was not full, a claim starts from
// the beginning, which finds rows behind the cursor (retries coming due, late commits of
// lower IDs, expired claims).
type cursor struct {
	after   outbox.ID
	sweepAt time.Time // wall time of the next claim from the beginning
}

// next returns the cursor for the next claim.
func (c *cursor) next(sweep time.Duration) outbox.ID {
	if now := time.Now(); !now.Before(c.sweepAt) {
		c.after = outbox.ID{}
		c.sweepAt = now.Add(sweep)
	}
	return c.after
}

// advance moves the cursor past a full batch ending at last, or back to the start.
func (c *cursor) advance(full bool, last outbox.ID) {
	if full {
		c.after = last
	} else {
		c.after = outbox.ID{}
	}
}

// rowIDs lists the row IDs of emitted messages.
func rowIDs(es []emitted) []outbox.ID {
	ids := make([]outbox.ID, len(es))
	for i, e := range es {
		ids[i] = e.d.row.ID
	}
	return ids
}

// lastID is the ID of the last record, or the zero ID when there is none.
func lastID(recs []outbox.Record) outbox.ID {
	if len(recs) == 0 {
		return outbox.ID{}
	}
	return recs[len(recs)-1].ID
}
