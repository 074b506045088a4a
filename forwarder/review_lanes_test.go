package forwarder

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
)

// hiccupStore fails the next Complete of a lane row with a transient error, once armed.
type hiccupStore struct {
	outbox.Store
	failNextComplete atomic.Bool
	completes        atomic.Int64
}

func (s *hiccupStore) Complete(ctx context.Context, c outbox.CompleteParams) (int, error) {
	s.completes.Add(1)
	if c.Lane != outbox.Unordered && s.failNextComplete.CompareAndSwap(true, false) {
		return 0, &outbox.RetryableError{Err: errors.New("review: injected deadlock (Error 1213)")}
	}
	return s.Store.Complete(ctx, c)
}

// R2: retryLane decides whether a failed Complete is still worth retrying from q.until,
// the claim expiry the row had when it was claimed. The lane worker renews the claim of
// the row in flight while the handler works (renewQueue updates queue[0].until), but q
// is a copy taken before the send and keeps the old expiry. After a handler that ran
// longer than ClaimTTL, the first transient error of its Complete is treated as "claim
// expired": the worker gives up, stops the lane, releases the (live) claim of the row it
// has just published, and the row is sent again.
func TestReviewLaneCompleteRetryUsesRenewedClaim(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		st := &hiccupStore{Store: tb.store}
		rec := newRecorder()
		released := make(chan struct{})
		inHandler := make(chan time.Time, 1)
		var firstCall atomic.Bool
		key := keyInLane(1, tb.opts.Lanes, 0)
		row := tb.row("t", key, key+"/0")
		tb.insert(t, row)
		cfg := fastConfig()
		cfg.DisableUnordered = true
		cfg.ClaimTTL = 2 * time.Second
		rec.fail = func(string, *message.Message) error {
			if !firstCall.CompareAndSwap(false, true) {
				return nil
			}
			// First delivery: hold the handler until the row's original claim expiry
			// has passed (the worker keeps renewing it meanwhile), then let it ack with
			// a transient error waiting for the Complete.
			inHandler <- time.Now().Add(cfg.ClaimTTL)
			<-released
			return nil
		}
		_, _ = start(t, st, Targets{"": rec}, cfg)
		var claimedUntil time.Time
		select {
		case claimedUntil = <-inHandler:
		case <-time.After(20 * time.Second):
			t.Fatal("the row never reached the handler")
		}
		for time.Now().Before(claimedUntil.Add(300 * time.Millisecond)) {
			time.Sleep(20 * time.Millisecond)
		}
		// The claim must still be live (renewed while in flight).
		got, err := tb.store.Read(context.Background(), outbox.ReadQuery{Lane: 1, Now: time.Now()}, make([]outbox.Record, 1))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 0 {
			t.Fatal("the claim of the row in flight was not renewed (precondition)")
		}
		st.failNextComplete.Store(true)
		close(released)
		waitFor(t, 20*time.Second, "row deleted", func() bool { return tb.rows(t) == 0 })
		if n := len(rec.got()); n != 1 {
			t.Fatalf("R2: the row was published %d times: a single transient Complete error after a long handler made the worker give up (stale claim expiry) and release the sent row", n)
		}
	})
}
