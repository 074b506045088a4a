package forwarder

import (
	"context"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	outbox "github.com/relayer-go/watermill-outbox"
)

// lResult is the outcome of one emitted row of a locked batch.
type lResult struct {
	d     *delivery
	acked bool
}

// runLocked is an unordered claim loop of UnorderedLocking: it locks a batch, emits its
// rows, waits for all their outcomes and finishes the batch in one transaction. It holds
// at most one batch (and one connection) at a time.
func (f *Forwarder) runLocked(bl outbox.BatchLocker, wakeCh <-chan struct{}, window int) {
	defer f.emitters.Done()
	cfg := &f.cfg
	idle, errDelay := cfg.PollInterval, cfg.PollInterval
	for {
		if f.isStopping() {
			return
		}
		n, err := f.lockedBatch(bl, min(cfg.ClaimBatch, window))
		var delay time.Duration
		switch {
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
			if n == min(cfg.ClaimBatch, window) {
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

// lockedBatch runs one locked batch and returns the number of rows it locked.
func (f *Forwarder) lockedBatch(bl outbox.BatchLocker, limit int) (int, error) {
	cfg := &f.cfg
	ctx := f.hardCtx
	lb, err := bl.LockBatch(ctx, limit, f.now())
	if err != nil {
		return 0, err
	}
	recs := lb.Records()
	if len(recs) == 0 {
		if err := lb.Rollback(); err != nil {
			f.logger.Debug("Rollback of an empty locked batch failed", watermill.LogFields{"error": err.Error()})
		}
		return 0, nil
	}
	// The batch's slowest message holds every lock of the batch: ClaimTTL bounds it.
	deadline := time.Now().Add(cfg.ClaimTTL)
	counters := &f.counters[0]
	results := make(chan lResult, len(recs)) // never blocks: one watcher per row
	var failed []outbox.FailParams
	open := 0
	rollback := func(why string) {
		if open > 0 {
			counters.inFlight.Add(int64(-open))
			f.reportInFlight(outbox.Unordered)
		}
		if err := lb.Rollback(); err != nil {
			f.logger.Error("Rollback of a locked batch failed (the connection's end releases the locks)", err, nil)
		}
		f.logger.Info(why, watermill.LogFields{"rows": len(recs)})
	}
	for i := range recs {
		if f.isStopping() || time.Now().After(deadline) {
			break // rows not emitted stay unchanged: the commit releases them
		}
		msg, d, reason := f.prepare(&recs[i])
		if reason != "" {
			f.logger.Error("Parking a row that cannot be sent", nil, watermill.LogFields{"row_id": recs[i].ID.String(), "reason": reason})
			failed = append(failed, outbox.FailParams{ID: recs[i].ID, Now: f.now(), Error: reason, Park: true, Lane: outbox.Unordered})
			f.countFailure(outbox.Unordered, true)
			continue
		}
		open++
		counters.inFlight.Add(1)
		f.reportInFlight(outbox.Unordered)
		if !f.emit(ctx, msg, cfg.ClaimTTL, func() {}) {
			open-- // never handed over
			counters.inFlight.Add(-1)
			rollback("Shutdown timeout: locked batch rolled back; its rows are eligible again")
			return len(recs), nil
		}
		go func() {
			if acked, ok := f.watch(msg); ok {
				results <- lResult{d: d, acked: acked}
			}
		}()
	}

	var done []outbox.ID
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for open > 0 {
		select {
		case r := <-results:
			open--
			counters.inFlight.Add(-1)
			f.reportInFlight(outbox.Unordered)
			if r.acked {
				done = append(done, r.d.row.ID)
				counters.sent.Add(1)
				f.metrics.MessageSent(outbox.Unordered)
				continue
			}
			attempts := r.d.row.Attempts + 1
			now := f.now()
			park := attempts >= cfg.MaxAttempts
			failed = append(failed, outbox.FailParams{
				ID: r.d.row.ID, Now: now, Error: r.d.failure(),
				RetryAt: now.Add(cfg.backoff(attempts)), Park: park, Lane: outbox.Unordered,
			})
			f.countFailure(outbox.Unordered, park)
			if park {
				f.logger.Error("Row parked after too many attempts", nil, watermill.LogFields{
					"row_id": r.d.row.ID.String(), "attempts": attempts, "last_error": r.d.failure()})
			}
		case <-timer.C:
			rollback("Locked batch not acked within ClaimTTL: rolled back; its acked rows may be sent again")
			return len(recs), nil
		case <-f.abandon:
			rollback("Shutdown timeout: locked batch rolled back; its acked rows may be sent again")
			return len(recs), nil
		}
	}
	fctx, cancel := context.WithTimeout(ctx, cfg.ClaimTTL)
	defer cancel()
	if err := lb.Finish(fctx, done, failed); err != nil {
		_ = lb.Rollback()
		return len(recs), err
	}
	return len(recs), nil
}
