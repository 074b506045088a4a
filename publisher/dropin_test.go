package publisher_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/internal/chaos"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// TestMiddlewareRouterWideLeavesForwarderAlone: the middleware installed router-wide on
// the router that also runs the forwarder. The forwarder forwards 1,000 messages and the
// outbox opens no transaction for them; the consumer of the forwarded messages, a
// handler of the same router, still gets one transaction per message.
func TestMiddlewareRouterWideLeavesForwarderAlone(t *testing.T) {
	eachDialect(t, 8, func(t *testing.T, e *env) {
		const n = 1000
		ob := e.newOutbox(t, publisher.Config{})
		msgs := make([]*message.Message, n)
		for i := range msgs {
			msgs[i] = newMsg(watermill.NewUUID(), fmt.Sprint(i), publisher.MetadataOrderingKey, fmt.Sprint(i%10))
		}
		if err := ob.WithTx(t.Context(), func(_ context.Context, tx *publisher.Tx) error {
			return tx.Publish("forwarded", msgs...)
		}); err != nil {
			t.Fatal(err)
		}
		before := ob.Stats()

		logger := watermill.NopLogger{}
		broker := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: n}, logger)
		router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logger)
		if err != nil {
			t.Fatal(err)
		}
		router.AddMiddleware(ob.Middleware())
		fwd, err := forwarder.New(e.store, forwarder.Targets{"": broker}, forwarder.Config{PollInterval: 20 * time.Millisecond}, logger)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fwd.AddToRouter(router); err != nil {
			t.Fatal(err)
		}
		var consumed atomic.Int64
		router.AddConsumerHandler("consumer", "forwarded", broker, func(msg *message.Message) error {
			if _, ok := publisher.TxFromContext(msg.Context()); !ok {
				return errors.New("consumer handler has no outbox transaction")
			}
			consumed.Add(1)
			return nil
		})
		chaos.RunRouter(t, router)
		chaos.WaitFor(t, 60*time.Second, "1,000 messages forwarded and consumed", func() bool { return consumed.Load() == n })

		after := ob.Stats()
		opened := after.Begun - before.Begun
		t.Logf("transactions opened while forwarding %d messages and consuming them: %d (consumer %d, forwarder %d)", n, opened, n, opened-n)
		if opened != n {
			t.Fatalf("the outbox opened %d transactions; want %d (one per consumed message, none for the forwarder's)", opened, n)
		}
	})
}

// TestBeginAfterIdleConnectionKilled: the pool's only connection is ended by the
// server while it sits idle (pg_terminate_backend, KILL: a restart or an administrator).
// Begin takes a fresh connection instead of failing (PostgreSQL reports 57P01 to the
// next statement; nothing was sent), and the transaction commits.
func TestBeginAfterIdleConnectionKilled(t *testing.T) {
	eachDialect(t, 8, func(t *testing.T, e *env) {
		ctx := t.Context()
		db, err := e.d.open(e.d.dsn(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		db.SetMaxOpenConns(1)
		db.SetMaxIdleConns(1)
		store, err := e.d.store(db, e.opts)
		if err != nil {
			t.Fatal(err)
		}
		ob, err := publisher.New(store, publisher.Config{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		// Use the connection twice: pgx pings a pooled connection before reuse only when
		// its last reuse is more than a second old, so the second use makes the next one
		// go out unchecked, as on a busy pool.
		var id int64
		for range 2 {
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := conn.QueryRowContext(ctx, e.d.connID).Scan(&id); err != nil {
				t.Fatal(err)
			}
			conn.Close() // back to the pool, idle
		}
		q, args := e.d.kill(id)
		if _, err := e.db.ExecContext(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // the server has closed it

		tx, err := ob.Begin(ctx)
		if err != nil {
			t.Fatalf("Begin on a pool whose idle connection the server ended: %v", err)
		}
		if err := tx.Publish("t", newMsg(watermill.NewUUID(), "after kill")); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if n := e.count(t, e.outbox); n != 1 {
			t.Fatalf("%d rows; want 1", n)
		}
	})
}
