package forwarder

import (
	"context"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

// What the failure "TestOrderedPerKeyOrder/mariadb key key-2: got #0, want #1"
// (clean-clone run at f570f8e, strict check i != next) was: a replay, not an order
// violation. A lane lease lost while #0 of a key is in the handler (at f570f8e LeaseTTL
// was 600 ms with sequential renewals, so a loaded machine lost leases) leaves #0
// published but not deleted (its Complete is fenced); the lane's next worker sends #0
// again once the old claim expires, then #1: the sequence is 0, 0, 1 -- "got #0, want
// #1" under the old strict check, a tolerated duplicate under the current one. A gap
// (#1 before #0) never happens.
//
// R6: the fencing half -- the forwarder that lost the lease must not send #1 (the
// lease is taken at an instant past every expiry it could have renewed to, as by a peer
// whose clock runs ahead, so only the store can tell it that the lease is gone).
// Deleting a lane's sent rows only at the end of the claimed run lets it send every
// queued row first: 0, 1, 0, 1.
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
		start(t, tb.store, Targets{"": rec}, cfg)
		waitFor(t, 20*time.Second, "#0 in the handler", func() bool { return rec.callCount() == 1 })

		// The lease is lost while #0 is in flight: another owner takes it (at an instant
		// past every expiry the forwarder could have renewed to) and gives it back.
		thief := takeOver(t, tb, lane)
		if _, err := tb.store.ReleaseLease(context.Background(), lane, thief); err != nil {
			t.Fatal(err)
		}
		rec.mu.Lock()
		rec.gate = nil
		rec.mu.Unlock()
		close(gate) // #0 published; its delete is refused (fenced)
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
