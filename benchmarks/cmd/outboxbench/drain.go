package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	wmforwarder "github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/headercodec"
	"github.com/relayer-go/watermill-outbox/internal/pubbench"
)

// wmTuned is the best watermill-sql setting found for draining: the queue schema
// (SELECT ... FOR UPDATE of a batch, one DELETE per batch on ack) with large batches
// and a short poll interval.
const (
	wmTunedBatch = 1000
	wmTunedPoll  = 10 * time.Millisecond
)

// Ours with a larger claim and in-flight window, the counterpart of Watermill's tuned
// setting.
const (
	oursTunedClaim    = 500
	oursTunedInFlight = 2000
)

// drainSection: the same backlog drained by each contender from a fresh table of its
// own, one after the other in every run; ratios are taken within the run.
func drainSection(ctx context.Context, e *engine, cfg config, sec *section) error {
	n := cfg.drainRows
	partial := map[string]int{}
	for run := 0; run < cfg.runs; run++ {
		rate := map[string]float64{}
		measure := func(name string, fn func() (float64, error)) error {
			e.quiesce(ctx)
			r, err := fn()
			if errors.Is(err, errDeadline) {
				partial[name]++
				err = nil
			}
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			rate[name] = r
			return nil
		}
		steps := []struct {
			name string
			fn   func() (float64, error)
		}{
			{"raw", func() (float64, error) { return drainRaw(ctx, e, n, cfg.drainLimit) }},
			{"ours_unordered", func() (float64, error) {
				return drainOurs(ctx, e, n, 0, forwarder.Config{TokenClaims: true}, 1, cfg.drainLimit)
			}},
			{"ours_unordered_tuned", func() (float64, error) {
				return drainOurs(ctx, e, n, 0, forwarder.Config{TokenClaims: true, ClaimBatch: oursTunedClaim, InFlight: oursTunedInFlight}, 1, cfg.drainLimit)
			}},
			{"ours_unordered_locking", func() (float64, error) {
				return drainOurs(ctx, e, n, 0, forwarder.Config{}, 1, cfg.drainLimit)
			}},
			{"ours_ordered", func() (float64, error) { return drainOurs(ctx, e, n, 1000, forwarder.Config{}, 1, cfg.drainLimit) }},
			{"watermill_default", func() (float64, error) { return drainWM(ctx, e, n, false, 0, 0, cfg.drainLimit) }},
			{"watermill_tuned", func() (float64, error) {
				return drainWM(ctx, e, n, true, wmTunedBatch, wmTunedPoll, cfg.drainLimit)
			}},
		}
		for _, s := range steps {
			if err := measure(s.name, s.fn); err != nil {
				return err
			}
		}
		sec.add("raw_msgs_per_s", "raw loop (SKIP LOCKED claim 500 + batch DELETE, 4 workers)", "msgs/s", rate["raw"])
		sec.add("ours_unordered_msgs_per_s", "ours, unordered, TokenClaims", "msgs/s", rate["ours_unordered"])
		sec.add("ours_unordered_tuned_msgs_per_s", fmt.Sprintf("ours, unordered, TokenClaims, ClaimBatch %d, InFlight %d", oursTunedClaim, oursTunedInFlight), "msgs/s", rate["ours_unordered_tuned"])
		sec.add("ours_unordered_locking_msgs_per_s", "ours, unordered, row locks (default Config)", "msgs/s", rate["ours_unordered_locking"])
		sec.add("ours_ordered_msgs_per_s", "ours, ordered (64 lanes, 1,000 keys)", "msgs/s", rate["ours_ordered"])
		sec.add("watermill_default_msgs_per_s", "Watermill forwarder, watermill-sql defaults", "msgs/s", rate["watermill_default"])
		sec.add("watermill_tuned_msgs_per_s", fmt.Sprintf("Watermill forwarder, queue schema, batch %d, poll %s", wmTunedBatch, wmTunedPoll), "msgs/s", rate["watermill_tuned"])
		sec.add("ratio_ours_unordered_raw", "ours unordered TokenClaims / raw", "ratio", rate["ours_unordered"]/rate["raw"])
		sec.add("ratio_ours_locking_raw", "ours unordered row locks / raw", "ratio", rate["ours_unordered_locking"]/rate["raw"])
		sec.add("ratio_ours_ordered_raw", "ours ordered / raw", "ratio", rate["ours_ordered"]/rate["raw"])
		sec.add("ratio_ours_unordered_watermill_default", "ours unordered TokenClaims / Watermill default", "ratio", rate["ours_unordered"]/rate["watermill_default"])
		sec.add("ratio_ours_unordered_watermill_tuned", "ours unordered TokenClaims / Watermill tuned", "ratio", rate["ours_unordered"]/rate["watermill_tuned"])
		sec.add("ratio_ours_tuned_watermill_tuned", "ours unordered TokenClaims tuned / Watermill tuned", "ratio", rate["ours_unordered_tuned"]/rate["watermill_tuned"])
		sec.add("ratio_ours_locking_watermill_tuned", "ours unordered row locks / Watermill tuned", "ratio", rate["ours_unordered_locking"]/rate["watermill_tuned"])
		sec.add("ratio_ours_tuned_raw", "ours unordered TokenClaims tuned / raw", "ratio", rate["ours_unordered_tuned"]/rate["raw"])
		sec.add("ratio_ours_ordered_watermill_tuned", "ours ordered / Watermill tuned", "ratio", rate["ours_ordered"]/rate["watermill_tuned"])
	}
	sec.note("Rates: messages handed to the no-op publisher and deleted/acked, divided by the time from start until the " +
		"last delete: the raw loop's last commit, ours' last delete once the table is empty (a store wrapper records it), " +
		"Watermill's when a poll every 5 ms finds the table empty (watermill-sql default schema: until the consumer " +
		"offset reaches the last message). " +
		"Watermill's forwarder (components/forwarder over a watermill-sql subscriber) handles one message at a time by design.")
	for name, k := range partial {
		sec.note("%s hit the %s limit in %d run(s): its rate is the messages done within the limit.", name, cfg.drainLimit, k)
	}
	return nil
}

// drainOurs fills a fresh table with n rows (keys > 0: ordered) and runs `instances`
// forwarders with cfg over it into one no-op publisher until the table is empty.
// It returns messages/s.
func drainOurs(ctx context.Context, e *engine, n, keys int, cfg forwarder.Config, instances int, limit time.Duration) (float64, error) {
	t, err := e.newOutboxTable(ctx)
	if err != nil {
		return 0, err
	}
	defer t.drop()
	if err := fillOutbox(ctx, t, n, keys, destination); err != nil {
		return 0, err
	}
	nop := &nopPublisher{}
	return runOurs(ctx, t, cfg, instances, nop, nop.Count, n, limit)
}

// runOurs runs forwarders over a filled table into pub until count reaches n and the
// table is empty, and times them to their last delete (deleteClock).
func runOurs(ctx context.Context, t *outboxTable, cfg forwarder.Config, instances int, pub message.Publisher, count func() int64, n int, limit time.Duration) (float64, error) {
	clock, err := newDeleteClock(t.store)
	if err != nil {
		return 0, err
	}
	fctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make(chan error, instances)
	start := time.Now()
	for i := 0; i < instances; i++ {
		c := cfg
		c.Owner = fmt.Sprintf("bench-%d-%s", i, t.opts.TablePrefix)
		c.StatsInterval = -1
		f, err := forwarder.New(clock, forwarder.Targets{"": pub}, c, nil)
		if err != nil {
			cancel()
			return 0, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f.Run(fctx); err != nil {
				errs <- err
			}
		}()
	}
	deadline := start.Add(limit)
	err = waitDone(ctx, deadline, 2*time.Millisecond, func() (bool, error) {
		select {
		case err := <-errs:
			return false, fmt.Errorf("forwarder stopped: %w", err)
		default:
		}
		return count() >= int64(n), nil
	})
	if err == nil {
		err = waitDone(ctx, deadline, 5*time.Millisecond, func() (bool, error) {
			left, err := t.rows(ctx)
			return left == 0, err
		})
	}
	elapsed := time.Since(start)
	if last := clock.lastDelete(); err == nil && last.After(start) {
		elapsed = last.Sub(start) // the table is empty: its last delete ended the drain (deleteClock)
	}
	cancel()
	wg.Wait()
	if err != nil && !errors.Is(err, errDeadline) {
		return 0, err
	}
	return float64(min(count(), int64(n))) / elapsed.Seconds(), err
}

// drainWM queues n messages through Watermill's outbox publisher and runs Watermill's
// forwarder (a router with one handler over a watermill-sql subscriber) into a no-op
// publisher until all are sent and acknowledged.
func drainWM(ctx context.Context, e *engine, n int, queue bool, batch int, poll time.Duration, limit time.Duration) (float64, error) {
	w, err := e.newWMTables(ctx, queue, batch)
	if err != nil {
		return 0, err
	}
	defer w.drop()
	if err := fillWM(ctx, w, n); err != nil {
		return 0, err
	}
	last, err := w.maxOffset(ctx)
	if err != nil {
		return 0, err
	}
	sub, err := w.subscriber(poll)
	if err != nil {
		return 0, err
	}
	nop := &nopPublisher{}
	fwd, err := wmforwarder.NewForwarder(sub, nop, nil, wmforwarder.Config{ForwarderTopic: w.topic})
	if err != nil {
		return 0, err
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr := make(chan error, 1)
	start := time.Now()
	go func() { runErr <- fwd.Run(fctx) }()
	deadline := start.Add(limit)
	err = waitDone(ctx, deadline, 2*time.Millisecond, func() (bool, error) {
		select {
		case err := <-runErr:
			return false, fmt.Errorf("watermill forwarder stopped: %v", err)
		default:
		}
		return nop.Count() >= int64(n), nil
	})
	if err == nil {
		err = waitDone(ctx, deadline, 5*time.Millisecond, func() (bool, error) {
			if queue {
				left, err := w.rows(ctx)
				return left == 0, err
			}
			acked, err := w.acked(ctx)
			return acked >= last, err
		})
	}
	elapsed := time.Since(start)
	_ = fwd.Close()
	cancel()
	if err != nil && !errors.Is(err, errDeadline) {
		return 0, err
	}
	return float64(min(nop.Count(), int64(n))) / elapsed.Seconds(), err
}

// drainRaw is the floor: 4 workers, each claiming 500 eligible unordered rows with
// FOR UPDATE SKIP LOCKED, handing them to the no-op publisher as Watermill messages
// and deleting them in one statement, one transaction per batch.
func drainRaw(ctx context.Context, e *engine, n int, limit time.Duration) (float64, error) {
	t, err := e.newOutboxTable(ctx)
	if err != nil {
		return 0, err
	}
	defer t.drop()
	if err := fillOutbox(ctx, t, n, 0, destination); err != nil {
		return 0, err
	}
	return rawLoop(ctx, e, t, &nopPublisher{}, 1, n, limit)
}

// rawLoop drains n rows of the filled table t with the hand-written loop of drainRaw,
// each worker publishing its batch through up to fanout goroutines at once before the
// delete (fanout 1: one message after another); rows/s.
func rawLoop(ctx context.Context, e *engine, t *outboxTable, pub message.Publisher, fanout, n int, limit time.Duration) (float64, error) {
	sel := fmt.Sprintf(`SELECT id, message_uuid, destination, headers, body FROM %s
WHERE status = 'pending' AND %s AND deliver_at <= %s AND (claim_expires_at IS NULL OR claim_expires_at <= %s)
ORDER BY id LIMIT 500 FOR UPDATE SKIP LOCKED`, t.name(), e.unorderedWhere(), e.ph(1), e.ph(2))
	var deleted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	start := time.Now()
	deadline := start.Add(limit)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids := make([]any, 0, 500)
			for deleted.Load() < int64(n) && time.Now().Before(deadline) && ctx.Err() == nil {
				got, err := rawBatch(ctx, e, t, sel, pub, fanout, ids)
				if err != nil {
					if e.retryable(err) {
						continue
					}
					errs <- err
					return
				}
				if got == 0 {
					time.Sleep(time.Millisecond)
				}
				deleted.Add(int64(got))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	var derr error
	if deleted.Load() < int64(n) {
		derr = errDeadline
	}
	return float64(deleted.Load()) / elapsed.Seconds(), derr
}

func rawBatch(ctx context.Context, e *engine, t *outboxTable, sel string, pub message.Publisher, fanout int, ids []any) (int, error) {
	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	now := time.Now().UTC()
	rows, err := tx.QueryContext(ctx, sel, now, now)
	if err != nil {
		return 0, err
	}
	ids = ids[:0]
	var (
		batch []*message.Message
		dest  string
	)
	for rows.Next() {
		var id, headers, body []byte
		var uuid string
		if err := rows.Scan(&id, &uuid, &dest, &headers, &body); err != nil {
			rows.Close()
			return 0, err
		}
		md, err := headercodec.DecodeMetadata(headers)
		if err != nil {
			rows.Close()
			return 0, err
		}
		m := message.NewMessage(uuid, body)
		m.Metadata = md
		if fanout > 1 {
			batch = append(batch, m) // every row has the same destination
		} else if err := pub.Publish(dest, m); err != nil {
			rows.Close()
			return 0, err
		}
		ids = append(ids, id)
	}
	if err := rows.Close(); err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, nil
	}
	if err := pubbench.Concurrently(pub, dest, batch, fanout); err != nil {
		return 0, err
	}
	var b strings.Builder
	b.WriteString("DELETE FROM " + t.name() + " WHERE ")
	if e.name == "mysql" {
		b.WriteString("lane = -1 AND seq = -1 AND ")
	}
	b.WriteString("id IN (")
	for i := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(e.ph(i + 1))
	}
	b.WriteByte(')')
	if _, err := tx.ExecContext(ctx, b.String(), ids...); err != nil {
		return 0, err
	}
	return len(ids), tx.Commit()
}
