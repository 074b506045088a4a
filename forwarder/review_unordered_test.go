package forwarder

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
)

// R1: the unordered claimer renews only the claims of rows already emitted; rows of a
// claimed batch still waiting in the emit loop (the subscriber reads messages one at a
// time, as a plain message.Subscriber consumer may) keep their original expiry. Once it
// passes, the forwarder still holds and sends those rows, their deletes find no live
// claim, and the next claim takes them again: the same forwarder sends them twice.
//
// The consumer holds the first message until the store reports a row of the same batch
// eligible again (its claim expired while the forwarder holds it unsent), or until
// 3*ClaimTTL passed (a forwarder that renews never lets that happen). Then it acks
// everything; every row must arrive exactly once.
func TestReviewUnorderedClaimsOfUnemittedRowsExpire(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		const n = 6
		want := map[string]bool{}
		var recs []outbox.Record
		for i := range n {
			r := tb.row("t", "", "u"+string(rune('0'+i)))
			want[r.MessageUUID] = true
			recs = append(recs, r)
		}
		tb.insert(t, recs...)
		cfg := fastConfig()
		cfg.DisableOrdered = true
		cfg.TokenClaims = true
		cfg.Claimers = 1
		cfg.ClaimBatch = n
		cfg.InFlight = n
		cfg.ClaimTTL = 2 * time.Second
		f, err := New(tb.store, Targets{"": newRecorder()}, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		msgs, err := f.Subscribe(ctx, "review")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })

		var first *message.Message
		select {
		case first = <-msgs:
		case <-time.After(20 * time.Second):
			t.Fatal("no message")
		}
		// The claimer is now blocked handing over the second message of the batch.
		expired := false
		deadline := time.Now().Add(3 * cfg.ClaimTTL)
		for time.Now().Before(deadline) {
			got, err := tb.store.Read(context.Background(), outbox.ReadQuery{Lane: outbox.Unordered, Now: time.Now()}, make([]outbox.Record, n))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) > 0 {
				expired = true
				t.Logf("%d rows claimed by the forwarder and not yet sent are eligible again (claim expired while held)", len(got))
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if !expired {
			t.Log("claims of held rows stayed live")
		}
		seen := map[string]int{first.UUID: 1}
		first.Ack()
		// Ack everything until every row is deleted, then a little longer to catch resends.
		drained := time.Time{}
		timeout := time.After(25 * time.Second)
		for {
			select {
			case m := <-msgs:
				seen[m.UUID]++
				m.Ack()
				continue
			case <-timeout:
				t.Fatalf("timed out: %d rows left, seen %d", tb.rows(t), len(seen))
			case <-time.After(20 * time.Millisecond):
			}
			if tb.rows(t) == 0 {
				if drained.IsZero() {
					drained = time.Now()
				}
				if time.Since(drained) > 300*time.Millisecond {
					break
				}
			}
		}
		dups := 0
		for uuid, c := range seen {
			if !want[uuid] {
				t.Fatalf("unknown message %s", uuid)
			}
			if c > 1 {
				dups += c - 1
			}
		}
		if len(seen) != n {
			t.Fatalf("%d distinct messages, want %d", len(seen), n)
		}
		if dups > 0 {
			t.Fatalf("R1: one forwarder sent %d rows twice (claims of claimed-but-unemitted rows expired; expired=%v)", dups, expired)
		}
	})
}
