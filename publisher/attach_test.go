package publisher_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// TestAttachWithoutFlushReported: messages published into an attached transaction and
// never flushed are not silently dropped: NotifyCommitted, after the application's own
// commit, returns an error wrapping outbox.ErrNotFlushed that counts them.
func TestAttachWithoutFlushReported(t *testing.T) {
	eachDialect(t, 8, func(t *testing.T, e *env) {
		ctx := t.Context()
		ob := e.newOutbox(t, publisher.Config{})
		sqlTx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		otx := ob.Attach(sqlTx)
		if err := otx.Publish("orders", message.NewMessage("flushed", nil)); err != nil {
			t.Fatal(err)
		}
		if err := otx.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := otx.Publish("orders", message.NewMessage("a", nil), message.NewMessage("b", nil)); err != nil {
			t.Fatal(err)
		}
		if err := sqlTx.Commit(); err != nil {
			t.Fatal(err)
		}
		err = otx.NotifyCommitted()
		if !errors.Is(err, outbox.ErrNotFlushed) || !strings.Contains(err.Error(), "2 messages") {
			t.Fatalf("NotifyCommitted after an unflushed Publish: %v; want outbox.ErrNotFlushed counting 2 messages", err)
		}
		t.Logf("reported: %v", err)
		if err := otx.NotifyCommitted(); err != nil {
			t.Fatalf("second NotifyCommitted: %v; want nil (reported once)", err)
		}
		if n := e.count(t, e.outbox); n != 1 {
			t.Fatalf("%d outbox rows; want 1 (the flushed one)", n)
		}
	})
}

// TestWithAttached: the helper flushes what fn published when fn succeeds (the
// application commits), flushes nothing when fn fails, and closes the Tx so that a
// later Publish into it fails loudly.
func TestWithAttached(t *testing.T) {
	eachDialect(t, 8, func(t *testing.T, e *env) {
		ctx := t.Context()
		ob := e.newOutbox(t, publisher.Config{})
		sqlTx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var kept context.Context
		otx, err := ob.WithAttached(ctx, sqlTx, func(ctx context.Context, tx *publisher.Tx) error {
			if err := e.insertOrder(ctx, sqlTx, 1, "attached"); err != nil {
				return err
			}
			kept = ctx
			msg := message.NewMessage("event-1", nil)
			msg.SetContext(ctx)
			return ob.ContextPublisher().Publish("orders", msg) // through the ctx, as cqrs does
		})
		if err != nil {
			t.Fatal(err)
		}
		late := message.NewMessage("late", nil)
		late.SetContext(kept)
		if err := ob.ContextPublisher().Publish("orders", late); !errors.Is(err, outbox.ErrClosed) {
			t.Fatalf("Publish after WithAttached returned: %v; want outbox.ErrClosed", err)
		}
		if err := sqlTx.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := otx.NotifyCommitted(); err != nil {
			t.Fatal(err)
		}
		if o, r := e.count(t, e.orders), e.count(t, e.outbox); o != 1 || r != 1 {
			t.Fatalf("%d orders, %d outbox rows; want 1 and 1", o, r)
		}

		sqlTx, err = e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		failure := errors.New("business rule")
		_, err = ob.WithAttached(ctx, sqlTx, func(ctx context.Context, tx *publisher.Tx) error {
			if err := tx.Publish("orders", message.NewMessage("event-2", nil)); err != nil {
				return err
			}
			return failure
		})
		if !errors.Is(err, failure) {
			t.Fatalf("WithAttached with a failing fn: %v", err)
		}
		if err := sqlTx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if r := e.count(t, e.outbox); r != 1 {
			t.Fatalf("%d outbox rows; want 1", r)
		}
	})
}
