package inbox_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/relayer-go/watermill-outbox/inbox"
	"github.com/relayer-go/watermill-outbox/internal/inboxtest"
)

// TestHandlerSafeWiring: Inbox.NoPublishHandler on a real router whose router-level
// PoisonQueue and handler-level Retry (the wiring that commits failures under a
// router-wide middleware) surround it. A message whose handler always fails is
// poisoned with nothing committed, neither its effect nor its outgoing message nor its
// inbox record; one that fails once is applied once; a duplicate is skipped. Counters
// count attempts: Recorded includes the rolled-back ones.
func TestHandlerSafeWiring(t *testing.T) {
	inboxtest.EachDialectWired(t, inboxtest.Fused, func(t *testing.T, e *inboxtest.Env) {
		logger := watermill.NopLogger{}
		pubsub := gochannel.NewGoChannel(gochannel.Config{}, logger)
		poisoned, err := pubsub.Subscribe(t.Context(), "poison")
		if err != nil {
			t.Fatal(err)
		}
		router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, logger)
		if err != nil {
			t.Fatal(err)
		}
		poison, err := middleware.PoisonQueue(pubsub, "poison")
		if err != nil {
			t.Fatal(err)
		}
		router.AddMiddleware(poison)
		in, err := inbox.New(e.Store, inbox.Config{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		attempts := map[string]int{}
		var calls atomic.Int64
		apply := handler(e, &calls)
		h := router.AddConsumerHandler("billing", "in", pubsub, in.NoPublishHandler(e.Out, func(msg *message.Message) error {
			if err := apply(msg); err != nil {
				return err
			}
			mu.Lock()
			attempts[msg.UUID]++
			n := attempts[msg.UUID]
			mu.Unlock()
			if msg.UUID == "always" || msg.UUID == "once" && n == 1 {
				return errors.New("fails after its write and its message")
			}
			return nil
		}))
		h.AddMiddleware(middleware.Retry{MaxRetries: 2, InitialInterval: time.Millisecond}.Middleware)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan struct{})
		go func() { defer close(done); _ = router.Run(ctx) }()
		defer func() { cancel(); <-done }()
		<-router.Running()
		for _, uuid := range []string{"ok", "once", "always", "ok"} {
			if err := pubsub.Publish("in", message.NewMessage(uuid, nil)); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case m := <-poisoned:
			m.Ack()
			if m.UUID != "always" {
				t.Fatalf("poisoned %s; want always", m.UUID)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("nothing poisoned")
		}
		deadline := time.Now().Add(10 * time.Second)
		for in.Counters().Duplicates < 1 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond)
		e.CheckApplications(t, 2) // ok and once, once each
		if o, r := e.OutboxRows(t), e.InboxRows(t); o != 2 || r != 2 {
			t.Fatalf("%d outbox rows, %d inbox records; want 2 and 2 (nothing of the poisoned message)", o, r)
		}
		// Recorded counts attempts: ok 1, once 2, always 3.
		if c := in.Counters(); c.Recorded != 6 || c.Duplicates != 1 {
			t.Fatalf("counters %+v; want Recorded 6 (attempts, rolled back ones included), Duplicates 1", c)
		}
	})
}
