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
	"github.com/relayer-go/watermill-outbox/publisher"
)

// runRouter runs router until the test ends (bounded) and waits until it runs.
func runRouter(t *testing.T, router *message.Router) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- router.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("router: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("router did not stop within 30 s")
		}
	})
	select {
	case <-router.Running():
	case <-time.After(30 * time.Second):
		t.Fatal("router not running after 30 s")
	}
}

// waitFor polls cond every 10 ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

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
		if err := ob.WithTx(t.Context(), e.db, func(_ context.Context, tx *publisher.Tx) error {
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
		router.AddMiddleware(ob.Middleware(e.db))
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
		runRouter(t, router)
		waitFor(t, 60*time.Second, "1,000 messages forwarded and consumed", func() bool { return consumed.Load() == n })

		after := ob.Stats()
		opened := after.Begun - before.Begun
		t.Logf("transactions opened while forwarding %d messages and consuming them: %d (consumer %d, forwarder %d)", n, opened, n, opened-n)
		if opened != n {
			t.Fatalf("the outbox opened %d transactions; want %d (one per consumed message, none for the forwarder's)", opened, n)
		}
	})
}
