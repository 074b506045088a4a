package forwarder

import (
	"context"
	"testing"
	"time"
)

// A lane lease lost while #0 of a key is in the handler (the process paused past its
// lease) leaves #0 published but not deleted (its Complete is fenced); the lane's next
// holder sends #0 again, then #1: 0, 0, 1. The holder that lost the lease must not send
// #1 when it resumes (its monotonic deadline has passed): 0, 1, 0, 1 would be the sign
// of a send after the takeover. A gap (#1 before #0) never happens.
func TestReviewLeaseLossReplaysHeadBeforeNext(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		const lane = 2
		key := keyInLane(lane, tb.opts.Lanes, 0)
		tb.insert(t, tb.row("t", key, key+"/0"), tb.row("t", key, key+"/1"))
		rec := newRecorder()
		gate := make(chan struct{})
		rec.gate = gate
		cfg := fastConfig()
		cfg.DisableUnordered = true
		cfg.LeaseTTL = 2 * time.Second
		ps := &pausedLeases{Store: tb.store}
		start(t, ps, Targets{"": rec}, cfg)
		waitFor(t, 20*time.Second, "#0 in the handler", func() bool { return rec.callCount() == 1 })

		// The lease is lost while #0 is in flight: the holder's renewals stop, another
		// owner takes the expired lease and gives it back.
		thief := expireAndTakeOver(t, tb, ps, lane)
		if _, err := tb.store.ReleaseLease(context.Background(), lane, thief); err != nil {
			t.Fatal(err)
		}
		rec.mu.Lock()
		rec.gate = nil
		rec.mu.Unlock()
		close(gate) // #0 published; its delete is refused (fenced)
		ps.unpause()
		waitFor(t, 30*time.Second, "both rows deleted", func() bool { return tb.rows(t) == 0 })
		var seq []int
		for _, p := range rec.got() {
			_, i := seqOf(t, p.msg)
			seq = append(seq, i)
		}
		t.Logf("deliveries of the key: %v", seq)
		next := 0
		for _, i := range seq {
			if i > next {
				t.Fatalf("gap: #%d before #%d in %v", i, next, seq)
			}
			if i == next {
				next++
			}
		}
		if len(seq) < 3 || seq[0] != 0 || seq[1] != 0 || seq[2] != 1 {
			t.Fatalf("R6: deliveries %v, want the replay 0, 0, 1: the forwarder that lost the lane's lease sent its next row", seq)
		}
	})
}
