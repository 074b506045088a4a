package forwarder

import (
	"context"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
)

// emitted is a message handed to the router and its row.
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
	failed   []outbox.FailParams // rows parked before they were emitted
	deadline time.Time
}

// runLocked is an unordered claim loop of row locks (the default claims). It locks a batch, emits its
// rows and, while their outcomes are awaited, locks and emits the next one: up to
// window/ClaimBatch batches (each an open transaction on its own pooled connection) are
// open at once, so the database works on one batch while the router sends another. Each
// batch is finished in its own transaction once all its rows are acked or nacked.
func (f *Forwarder) runLocked(bl outbox.BatchLocker, wakeCh <-chan struct{}, window int) {
	cfg := &f.cfg
	limit := min(cfg.ClaimBatch, window)
	slots := make(chan struct{}, max(window/limit, 1))
	var settling sync.WaitGroup
	defer func() {
		settling.Wait()
		f.emitters.Done()
	}()
	idle, errDelay := cfg.PollInterval, cfg.PollInterval
	var (
		cur cursor
		rt  renewTicker
	)
	for {
		if f.isStopping() {
			return
		}
		select {
		case slots <- struct{}{}:
		case <-f.stopping:
			return
		}
		after := cur.next(cfg.PollInterval)
		ob, n, last, err := f.lockAndEmit(bl, &rt, limit, after)
		if ob != nil {
			settling.Add(1)
			go func() {
				defer settling.Done()
				defer func() { <-slots }()
				if err := f.settle(ob); err != nil {
					f.logger.Error("Finishing a locked batch of unordered rows failed (its rows are released by the rollback and sent again)", err,
						watermill.LogFields{"rows": ob.rows})
				}
			}()
		} else {
			<-slots
		}
		cur.advance(n == limit, last)
		var delay time.Duration
		switch {
		case err == nil && n < limit && !after.IsZero():
			continue // the rest of the backlog may sit behind the cursor: sweep at once
		case err != nil:
			f.logger.Error("Locked batch of unordered rows failed; backing off (its rows are released by the rollback)", err,
				watermill.LogFields{"retry_in": errDelay})
			delay = errDelay
			errDelay = min(2*errDelay, cfg.MaxPollInterval)
		case n == 0:
			errDelay = cfg.PollInterval
			delay = idle
			idle = min(2*idle, cfg.MaxPollInterval)
		default:
			errDelay, idle = cfg.PollInterval, cfg.PollInterval
			if n == limit {
				continue // more may be waiting
			}
			delay = cfg.PollInterval
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-wakeCh:
			idle = cfg.PollInterval
		case <-f.stopping:
			t.Stop()
			return
		}
		t.Stop()
	}
}

// lockAndEmit locks up to limit rows after the cursor and emits them. It returns the
// batch to settle (nil when nothing is left to finish), the number of rows it locked and
// the last one's ID.
func (f *Forwarder) lockAndEmit(bl outbox.BatchLocker, rt *renewTicker, limit int, after outbox.ID) (*openBatch, int, outbox.ID, error) {
	cfg := &f.cfg
	ctx := f.hardCtx
	lb, err := bl.LockBatch(ctx, outbox.LockParams{Limit: limit, Now: f.now(), After: after})
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
	// The batch's slowest message holds every lock of the batch: ClaimTTL bounds it.
	ob := &openBatch{lb: lb, rows: len(recs), deadline: time.Now().Add(cfg.ClaimTTL),
		sent: make([]emitted, 0, len(recs))}
	counters := &f.counters[0]
	for i := range recs {
		if f.isStopping() || time.Now().After(ob.deadline) {
			break // rows not emitted stay unchanged: the commit releases them
		}
		msg, d, reason := f.prepare(&recs[i])
		if reason != "" {
			// Parked in the batch's transaction; counted and logged once it commits.
			ob.failed = append(ob.failed, outbox.FailParams{ID: recs[i].ID, Now: f.now(), Error: reason, Park: true, Lane: outbox.Unordered})
			continue
		}
		ob.open++
		counters.inFlight.Add(1)
		if !f.emit(f.handBack, msg, rt, cfg.ClaimTTL, func() {}) {
			ob.open-- // never handed over
			counters.inFlight.Add(-1)
			f.rollbackBatch(ob, "Shutting down: locked batch rolled back before the deadline; its rows are eligible again")
			return nil, len(recs), last, nil
		}
		ob.sent = append(ob.sent, emitted{msg: msg, d: d})
	}
	f.reportInFlight(outbox.Unordered)
	return ob, len(recs), last, nil
}

// rollbackBatch gives up a batch: its rows become eligible again unchanged.
func (f *Forwarder) rollbackBatch(ob *openBatch, why string) {
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

// lockHoldMax bounds how long a locked batch keeps its row locks (and its pooled
// connection) for its slowest messages: after it the rows still in flight are handed over
// to an ordinary claim (LockedBatch.Finish with Claim), the rest of the batch commits, and
// those rows are renewed, completed and failed through the Store like token claims.
const lockHoldMax = time.Second

// settle waits for the outcomes of a batch's emitted rows (in emission order: all of
// them are needed before the batch can finish, so one waiter per batch does, not one
// goroutine per message), then deletes the acked rows and records the failures in the
// batch's transaction. Rows still in flight after the hold time are handed over to a
// claim and settled by settleClaimed.
func (f *Forwarder) settle(ob *openBatch) error {
	cfg := &f.cfg
	counters := &f.counters[0]
	done := make([]outbox.ID, 0, len(ob.sent))
	failed := ob.failed
	record := func(e emitted, acked bool) {
		ob.open--
		counters.inFlight.Add(-1)
		if acked {
			done = append(done, e.d.row.ID)
			counters.sent.Add(1)
			f.metrics.MessageSent(outbox.Unordered)
			return
		}
		failed = append(failed, f.failureOf(e.d, outbox.Token{}))
	}
	timer := time.NewTimer(min(lockHoldMax, cfg.ClaimTTL/4))
	defer timer.Stop()
	hold := timer.C
	var rest []emitted // in flight when the hold time ran out
wait:
	for i := 0; i < len(ob.sent); i++ {
		e := ob.sent[i]
		select {
		case <-e.msg.Acked():
			record(e, true)
		case <-e.msg.Nacked():
			record(e, false)
		case <-hold:
			if f.isStopping() {
				// Shutting down: keep the locks; if the messages do not finish until
				// shortly before the deadline (handBack) the rollback makes the rows
				// eligible again at once.
				hold = nil
				i--
				continue
			}
			for _, e := range ob.sent[i:] {
				select {
				case <-e.msg.Acked():
					record(e, true)
				case <-e.msg.Nacked():
					record(e, false)
				default:
					rest = append(rest, e)
				}
			}
			break wait
		case <-f.handBack.Done():
			// Rolled back in the batch's own transaction before the deadline cancels its
			// context (which would roll it back asynchronously, after Close returned).
			f.rollbackBatch(ob, "Shutting down: locked batch rolled back before the deadline; its acked rows may be sent again")
			return nil
		}
	}
	f.reportInFlight(outbox.Unordered)
	p := outbox.FinishParams{Done: done, Failed: failed}
	if len(rest) > 0 {
		p.Claim, p.Token, p.Until = rowIDs(rest), outbox.NewToken(), f.now().Add(cfg.ClaimTTL)
	}
	fctx, cancel := context.WithTimeout(f.hardCtx, cfg.ClaimTTL)
	defer cancel()
	if err := ob.lb.Finish(fctx, p); err != nil {
		_ = ob.lb.Rollback()
		if len(rest) > 0 {
			counters.inFlight.Add(int64(-len(rest)))
			f.reportInFlight(outbox.Unordered)
		}
		return err
	}
	// Counted only now: a batch that rolls back recorded no failure.
	for i := range failed {
		f.countFailed(&failed[i])
	}
	if len(rest) > 0 {
		f.logger.Debug("Slow messages of a locked batch handed over to a claim", watermill.LogFields{"rows": len(rest)})
		f.settleClaimed(rest, p.Token, p.Until)
	}
	return nil
}

// settleClaimed waits for the outcomes of handed-over rows, renewing their claim while
// they wait, and completes or fails each through the completers.
func (f *Forwarder) settleClaimed(rest []emitted, token outbox.Token, until time.Time) {
	cfg := &f.cfg
	counters := &f.counters[0]
	renew := time.NewTicker(cfg.ClaimTTL / 4)
	defer renew.Stop()
	settled := func() {
		counters.inFlight.Add(-1)
		f.reportInFlight(outbox.Unordered)
	}
	for i, e := range rest {
		for {
			select {
			case <-e.msg.Acked():
				settled()
				counters.sent.Add(1)
				f.metrics.MessageSent(outbox.Unordered)
				f.submit(storeJob{complete: &outbox.CompleteParams{Token: token, IDs: []outbox.ID{e.d.row.ID}, Lane: outbox.Unordered}, until: until})
			case <-e.msg.Nacked():
				settled()
				fp := f.failureOf(e.d, token)
				f.submit(storeJob{fail: &fp, until: until})
			case <-renew.C:
				ids := rowIDs(rest[i:])
				now := f.now()
				next := now.Add(cfg.ClaimTTL)
				ctx, cancel := context.WithTimeout(f.hardCtx, cfg.ClaimTTL/4)
				n, err := f.store.Renew(ctx, outbox.RenewParams{Token: token, IDs: ids, Now: now, Until: next, Lane: outbox.Unordered})
				cancel()
				switch {
				case err != nil:
					f.logger.Error("Cannot renew the claims of slow unordered rows", err, nil)
				case n < len(ids):
					f.logger.Info("Claims of slow unordered rows expired; they may be sent twice", watermill.LogFields{"rows": len(ids) - n})
					until = next
				default:
					until = next
				}
				continue
			case <-f.handBack.Done():
				f.abandonClaimed(rest[i:], token)
				return
			}
			break
		}
	}
}

// abandonClaimed settles handed-over rows still open shortly before the shutdown
// deadline (Forwarder.handBack), in one try that ends at the deadline, so that Close
// stays within ShutdownTimeout: rows whose messages were acked meanwhile are deleted,
// the others' claims are given back so that another forwarder takes them at once. What
// the try does not finish, the claims' expiry does (the rows are sent again).
func (f *Forwarder) abandonClaimed(rest []emitted, token outbox.Token) {
	counters := &f.counters[0]
	counters.inFlight.Add(int64(-len(rest)))
	f.reportInFlight(outbox.Unordered)
	var acked, open []outbox.ID
	for _, e := range rest {
		select {
		case <-e.msg.Acked():
			acked = append(acked, e.d.row.ID)
			counters.sent.Add(1)
			f.metrics.MessageSent(outbox.Unordered)
		default:
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
