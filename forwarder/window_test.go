package forwarder

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

// deleteOutageStore refuses every Complete while down is set (claims keep working): a
// database that accepts reads and claims but whose deletes stall, or that goes down
// between a claim and its delete.
type deleteOutageStore struct {
	outbox.Store
	down atomic.Bool
}

func (s *deleteOutageStore) Complete(ctx context.Context, p outbox.CompleteParams) (int, error) {
	if s.down.Load() {
		return 0, errors.New("delete refused: simulated outage")
	}
	return s.Store.Complete(ctx, p)
}

// TestUnorderedWindowHoldsUntilDeletesLand: rows acked but not yet deleted stay in the
// claimer's window. While every delete fails (for less than the claim TTL), the
// forwarder sends no more than InFlight distinct rows; once deletes work again
// everything is delivered, with at most InFlight rows sent twice. Before, acks freed the window at once: the claimer kept
// claiming and sending while the deletes queued up, and all those rows were sent again
// (seen as 338 unordered duplicates in a restart of Oracle MySQL with InFlight 64).
func TestUnorderedWindowHoldsUntilDeletesLand(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		const rows, window = 600, 40
		recs := make([]outbox.Record, rows)
		for i := range recs {
			recs[i] = tb.row("w", "", fmt.Sprint(i))
		}
		tb.insert(t, recs...)
		st := &deleteOutageStore{Store: tb.store}
		st.down.Store(true)
		rec := newRecorder()
		cfg := fastConfig()
		cfg.InFlight, cfg.Claimers, cfg.ClaimBatch = window, 1, window
		cfg.ClaimTTL = 2 * time.Second
		outage := 600 * time.Millisecond
		start(t, st, Targets{"": rec}, cfg)

		time.Sleep(outage)
		distinct := func() int {
			seen := map[string]bool{}
			for _, p := range rec.got() {
				seen[p.msg.UUID] = true
			}
			return len(seen)
		}
		during := distinct()
		t.Logf("distinct rows sent while deletes failed for %s: %d (InFlight %d)", outage, during, window)
		if during > window {
			t.Errorf("%d distinct rows sent while no delete landed; the window is %d", during, window)
		}

		st.down.Store(false)
		waitFor(t, 30*time.Second, "every row delivered", func() bool { return distinct() == rows })
		waitFor(t, 10*time.Second, "the table drained", func() bool { return tb.rows(t) == 0 })
		dups := len(rec.got()) - rows
		t.Logf("duplicates after the outage: %d", dups)
		if dups > window {
			t.Errorf("%d duplicates; at most the window (%d) may be sent again", dups, window)
		}
	})
}
