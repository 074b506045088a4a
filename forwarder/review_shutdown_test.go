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

// hungStore makes Fail and Complete hang like a database that stopped answering (a
// network partition: no error, no reply) until the call's context ends or unhang is
// closed.
type hungStore struct {
	outbox.Store
	unhang  chan struct{}
	entered atomic.Int64
}

func (h *hungStore) hang(ctx context.Context) error {
	h.entered.Add(1)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-h.unhang:
		return nil
	}
}

func (h *hungStore) Fail(ctx context.Context, f outbox.FailParams) (bool, error) {
	if err := h.hang(ctx); err != nil {
		return false, err
	}
	return h.Store.Fail(ctx, f)
}

func (h *hungStore) Complete(ctx context.Context, c outbox.CompleteParams) (int, error) {
	if err := h.hang(ctx); err != nil {
		return 0, err
	}
	return h.Store.Complete(ctx, c)
}

// R4: Close waits for the completers without any deadline. Each queued store job
// (delete of acked rows, failure of a nacked row) gets a first attempt whose context
// lasts ClaimTTL, and completer.runJob keeps retrying until the row's claim expires; the shutdown
// deadline (abandon, hardCtx) is only armed while Close waits for the emitters. With a
// database that stops answering, Close takes about ClaimTTL per two queued jobs instead
// of about ShutdownTimeout.
func TestReviewCloseBoundedWhenDatabaseHangs(t *testing.T) {
	forEachDialect(t, func(t *testing.T, tb *table) {
		const n = 6
		var recs []outbox.Record
		for range n {
			recs = append(recs, tb.row("t", "", "nacked"))
		}
		tb.insert(t, recs...)
		hs := &hungStore{Store: tb.store, unhang: make(chan struct{})}
		var unhangOnce atomic.Bool
		unhang := func() {
			if unhangOnce.CompareAndSwap(false, true) {
				close(hs.unhang)
			}
		}
		t.Cleanup(unhang)
		rec := newRecorder()
		rec.fail = func(string, *message.Message) error { return errors.New("review: broker down") }
		cfg := fastConfig()
		cfg.DisableOrdered = true
		cfg.TokenClaims = true          // the completers' store jobs are what hangs
		cfg.ClaimTTL = 30 * time.Second // the default
		cfg.MaxAttempts = 100
		cfg.ShutdownTimeout = time.Second
		f, _ := start(t, hs, Targets{"": rec}, cfg)
		waitFor(t, 20*time.Second, "failures queued and the database hanging", func() bool {
			return hs.entered.Load() >= 2 && rec.callCount() >= n
		})
		closed := make(chan struct{})
		began := time.Now()
		go func() {
			_ = f.Close()
			close(closed)
		}()
		// Generous bound: ShutdownTimeout (1 s) plus the lease and release timeouts; the
		// jobs alone would hold Close for about n/2 * ClaimTTL = 90 s.
		select {
		case <-closed:
			t.Logf("Close returned after %s", time.Since(began).Round(time.Millisecond))
		case <-time.After(15 * time.Second):
			unhang()
			<-closed
			t.Fatalf("R4: Close took %s with a hung database (ShutdownTimeout %s): it waits for queued store jobs without a deadline",
				time.Since(began).Round(time.Second), cfg.ShutdownTimeout)
		}
	})
}
