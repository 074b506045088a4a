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

// A transient error of a lane run's delete after a long handler (longer than the lease,
// renewed meanwhile) is retried while the lease is live: the sent row is deleted once,
// not given up and sent again.
func TestLaneCompleteRetriedAfterLongHandler(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		st := &hiccupStore{Store: tb.store}
		rec := newRecorder()
		released := make(chan struct{})
		inHandler := make(chan struct{}, 1)
		var firstCall atomic.Bool
		key := keyInLane(1, tb.opts.Lanes, 0)
		row := tb.row("t", key, key+"/0")
		tb.insert(t, row)
		cfg := fastConfig()
		cfg.DisableUnordered = true
		cfg.LeaseTTL = time.Second
		rec.fail = func(string, *message.Message) error {
			if !firstCall.CompareAndSwap(false, true) {
				return nil
			}
			inHandler <- struct{}{}
			<-released
			return nil
		}
		_, _ = start(t, st, Targets{"": rec}, cfg)
		select {
		case <-inHandler:
		case <-time.After(20 * time.Second):
			t.Fatal("the row never reached the handler")
		}
		time.Sleep(2 * cfg.LeaseTTL) // the lease is renewed meanwhile
		st.failNextComplete.Store(true)
		close(released)
		waitFor(t, 20*time.Second, "row deleted", func() bool { return tb.rows(t) == 0 })
		if n := len(rec.got()); n != 1 {
			t.Fatalf("the row was published %d times: a transient delete error made the worker give up the sent row", n)
		}
	})
}
